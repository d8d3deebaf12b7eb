// The sort algorithm of GCC's std::sort (libstdc++'s introsort: quicksort with the median of the 2nd,
// middle and last elements moved to the front as the pivot, heapsort below 2*floor(log2 n) levels,
// then one insertion sort, 16 elements guarded), so that equal elements end up in the order hank-ai's
// Darknet (built with GCC) leaves them in, on every platform and standard library. Checked against
// libstdc++'s std::sort permutation by permutation in src-test/test_nms_order.py.
#pragma once
#include <cstddef>
#include <utility>

namespace dn {
namespace gnu_sort_detail {
constexpr std::ptrdiff_t kThreshold = 16;

template <class T, class Less>
void adjust_heap(T* first, std::ptrdiff_t hole, std::ptrdiff_t len, T value, Less& less) {
    const std::ptrdiff_t top = hole;
    std::ptrdiff_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (less(first[child], first[child - 1])) --child;
        first[hole] = std::move(first[child]);
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        first[hole] = std::move(first[child - 1]);
        hole = child - 1;
    }
    std::ptrdiff_t parent = (hole - 1) / 2;
    while (hole > top && less(first[parent], value)) {
        first[hole] = std::move(first[parent]);
        hole = parent;
        parent = (hole - 1) / 2;
    }
    first[hole] = std::move(value);
}

template <class T, class Less>
void heap_sort(T* first, T* last, Less& less) {
    std::ptrdiff_t len = last - first;
    if (len >= 2)
        for (std::ptrdiff_t parent = (len - 2) / 2;; --parent) {
            T v = std::move(first[parent]);
            adjust_heap(first, parent, len, std::move(v), less);
            if (parent == 0) break;
        }
    while (last - first > 1) {
        --last;
        T v = std::move(*last);
        *last = std::move(*first);
        adjust_heap(first, std::ptrdiff_t(0), last - first, std::move(v), less);
    }
}

template <class T, class Less>
void move_median_to_first(T* result, T* a, T* b, T* c, Less& less) {
    using std::swap;
    if (less(*a, *b)) {
        if (less(*b, *c)) swap(*result, *b);
        else if (less(*a, *c)) swap(*result, *c);
        else swap(*result, *a);
    } else if (less(*a, *c)) swap(*result, *a);
    else if (less(*b, *c)) swap(*result, *c);
    else swap(*result, *b);
}

template <class T, class Less>
T* unguarded_partition(T* first, T* last, T* pivot, Less& less) {
    using std::swap;
    while (true) {
        while (less(*first, *pivot)) ++first;
        --last;
        while (less(*pivot, *last)) --last;
        if (!(first < last)) return first;
        swap(*first, *last);
        ++first;
    }
}

template <class T, class Less>
void introsort_loop(T* first, T* last, int depth, Less& less) {
    while (last - first > kThreshold) {
        if (depth == 0) {
            heap_sort(first, last, less);
            return;
        }
        --depth;
        T* mid = first + (last - first) / 2;
        move_median_to_first(first, first + 1, mid, last - 1, less);
        T* cut = unguarded_partition(first + 1, last, first, less);
        introsort_loop(cut, last, depth, less);
        last = cut;
    }
}

template <class T, class Less>
void unguarded_linear_insert(T* last, Less& less) {
    T v = std::move(*last);
    T* next = last - 1;
    while (less(v, *next)) {
        *last = std::move(*next);
        last = next;
        --next;
    }
    *last = std::move(v);
}

template <class T, class Less>
void insertion_sort(T* first, T* last, Less& less) {
    if (first == last) return;
    for (T* i = first + 1; i != last; ++i) {
        if (less(*i, *first)) {
            T v = std::move(*i);
            for (T* p = i; p != first; --p) *p = std::move(*(p - 1));
            *first = std::move(v);
        } else {
            unguarded_linear_insert(i, less);
        }
    }
}
}  // namespace gnu_sort_detail

template <class T, class Less>
void gnu_sort(T* first, T* last, Less less) {
    namespace d = gnu_sort_detail;
    std::ptrdiff_t n = last - first;
    if (n < 2) return;
    int lg = 0;
    while ((std::ptrdiff_t(1) << (lg + 1)) <= n) ++lg;
    d::introsort_loop(first, last, 2 * lg, less);
    if (n > d::kThreshold) {
        d::insertion_sort(first, first + d::kThreshold, less);
        for (T* i = first + d::kThreshold; i != last; ++i) d::unguarded_linear_insert(i, less);
    } else {
        d::insertion_sort(first, last, less);
    }
}
}  // namespace dn
