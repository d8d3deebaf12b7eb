// Tensor: an NCHW fp32 array. Storage is shared (reference-counted) so that layers can hand
// views of their outputs to later layers without copies.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace dn {

struct Shape {
    int n = 1, c = 0, h = 0, w = 0;
    size_t size() const { return (size_t)n * c * h * w; }
    size_t plane() const { return (size_t)h * w; }
    size_t sample() const { return (size_t)c * h * w; }
    bool operator==(const Shape& o) const { return n == o.n && c == o.c && h == o.h && w == o.w; }
    bool operator!=(const Shape& o) const { return !(*this == o); }
    std::string str() const {
        return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
    }
};

class Tensor {
public:
    Tensor() = default;
    explicit Tensor(Shape s) : shape_(s), storage_(std::make_shared<std::vector<float>>(s.size(), 0.0f)) {}
    static Tensor zeros(int n, int c, int h, int w) { return Tensor(Shape{n, c, h, w}); }

    const Shape& shape() const { return shape_; }
    size_t size() const { return shape_.size(); }
    bool empty() const { return !storage_ || shape_.size() == 0; }
    float* data() { return storage_ ? storage_->data() : nullptr; }
    const float* data() const { return storage_ ? storage_->data() : nullptr; }
    float& operator[](size_t i) { return (*storage_)[i]; }
    float operator[](size_t i) const { return (*storage_)[i]; }

    // Reallocates only when the element count grows; contents are unspecified afterwards.
    void resize(Shape s) {
        if (!storage_ || storage_->size() < s.size()) storage_ = std::make_shared<std::vector<float>>(s.size(), 0.0f);
        shape_ = s;
    }

private:
    Shape shape_;
    std::shared_ptr<std::vector<float>> storage_;
};

}  // namespace dn
