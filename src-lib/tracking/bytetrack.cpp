#include "tracking/bytetrack.h"

#include <algorithm>
#include <string>

#include "errors.h"

namespace dn {

namespace {
// ByteTrackTracklet's noise: process 0.01 I, measurement 0.1 I (trackers 2.6)
constexpr double kProcess = 0.01;
constexpr double kMeasurement = 0.1;
// Whether each row and each column of an IoU matrix has at most one overlap (the usual frame: each
// track overlaps its own detection alone). Then every optimal assignment holds all those pairs, and
// its other pairs (IoU 0) fall below a positive threshold: the assignment is known without the
// solver, in its row order.
bool one_to_one(const std::vector<float>& iou, size_t rows, size_t cols) {
    std::vector<int> per_col(cols, 0);
    for (size_t i = 0; i < rows; ++i) {
        int in_row = 0;
        for (size_t j = 0; j < cols; ++j)
            if (iou[i * cols + j] > 0) {
                if (++in_row > 1 || ++per_col[j] > 1) return false;
            }
    }
    return true;
}

// The 4-value boxes of `boxes` at the positions `which`, packed in that order.
std::vector<double> gather(const std::vector<double>& boxes, const std::vector<size_t>& which) {
    std::vector<double> out;
    out.reserve(4 * which.size());
    for (size_t i : which) out.insert(out.end(), &boxes[4 * i], &boxes[4 * i] + 4);
    return out;
}

}  // namespace

std::vector<float> iou_matrix(const double* a, size_t na, const double* b, size_t nb) {
    std::vector<float> out(na * nb, 0.0f);
    for (size_t i = 0; i < na; ++i) {
        const double* p = a + 4 * i;
        const double area_a = (p[2] - p[0]) * (p[3] - p[1]);
        for (size_t j = 0; j < nb; ++j) {
            const double* q = b + 4 * j;
            const double iw = std::max(std::min(p[2], q[2]) - std::max(p[0], q[0]), 0.0);
            const double ih = std::max(std::min(p[3], q[3]) - std::max(p[1], q[1]), 0.0);
            const double inter = iw * ih;
            const double area_b = (q[2] - q[0]) * (q[3] - q[1]);
            const double uni = area_a + area_b - inter;
            if (uni > 0) out[i * nb + j] = (float)(inter / uni);
        }
    }
    return out;
}

std::vector<float> ByteTrack::begin(const float* boxes, const float* confidence, size_t n) {
    boxes_.assign(boxes, boxes + 4 * n);
    confidence_.assign(confidence, confidence + n);
    high_.clear(), low_.clear(), left_.clear(), match_track_.clear(), match_det_.clear();
    iou_high_.clear(), iou_low_.clear();
    predicted_.clear();
    solved_high_ = solved_low_ = false;
    first_stage_ = 0;
    every_track_.resize(tracks_.size());
    for (size_t i = 0; i < every_track_.size(); ++i) every_track_[i] = i;
    if (tracks_.empty() && n == 0) return {};
    for (Track& t : tracks_) {
        for (int k = 0; k < 4; ++k) t.box[k] += t.velocity[k];
        // F P F^T + Q with F = [[1, 1], [0, 1]], summed in the order of the library's 8x8 products
        const double a = t.cov[0], b = t.cov[1], c = t.cov[2], d = t.cov[3];
        const double bd = b + d;
        t.cov[0] = ((a + c) + bd) + kProcess;
        t.cov[1] = bd;
        t.cov[2] = c + d;
        t.cov[3] = d + kProcess;
        if (t.missed > 0) t.streak = 0;
        t.missed += 1;
        predicted_.insert(predicted_.end(), t.box, t.box + 4);
    }
    for (size_t i = 0; i < n; ++i) (confidence_[i] >= p_.high_conf_det_threshold ? high_ : low_).push_back(i);
    std::vector<double> high_boxes = gather(boxes_, high_);
    iou_high_ = iou_matrix(predicted_.data(), tracks_.size(), high_boxes.data(), high_.size());
    solved_high_ = keep_if_one_to_one(iou_high_, every_track_, high_);
    return solved_high_ ? std::vector<float>() : iou_high_;
}

bool ByteTrack::keep_if_one_to_one(const std::vector<float>& iou, const std::vector<size_t>& track_of,
                                   const std::vector<size_t>& det_of) {
    const size_t cols = det_of.size();
    if (!(p_.minimum_iou_threshold > 0 && one_to_one(iou, track_of.size(), cols))) return false;
    for (size_t i = 0; i < track_of.size(); ++i)
        for (size_t j = 0; j < cols; ++j)
            if (iou[i * cols + j] >= p_.minimum_iou_threshold) match_track_.push_back(track_of[i]), match_det_.push_back(det_of[j]);
    return true;
}

void ByteTrack::keep_matches(const std::vector<float>& iou, const std::vector<int64_t>& rows,
                             const std::vector<int64_t>& cols, const std::vector<size_t>& track_of,
                             const std::vector<size_t>& det_of) {
    if (rows.size() != cols.size()) throw DarknetError("ByteTrack: rows and cols differ in length");
    for (size_t k = 0; k < rows.size(); ++k) {
        if (rows[k] < 0 || cols[k] < 0 || (size_t)rows[k] >= track_of.size() || (size_t)cols[k] >= det_of.size())
            throw DarknetError("ByteTrack: assignment out of range");
        if (iou[(size_t)rows[k] * det_of.size() + (size_t)cols[k]] >= p_.minimum_iou_threshold) {
            match_track_.push_back(track_of[(size_t)rows[k]]);
            match_det_.push_back(det_of[(size_t)cols[k]]);
        }
    }
}

std::vector<float> ByteTrack::second(const std::vector<int64_t>& rows, const std::vector<int64_t>& cols) {
    if (!solved_high_) keep_matches(iou_high_, rows, cols, every_track_, high_);
    first_stage_ = match_track_.size();
    std::vector<bool> taken(tracks_.size(), false);
    for (size_t t : match_track_) taken[t] = true;
    for (size_t i = 0; i < tracks_.size(); ++i)
        if (!taken[i]) left_.push_back(i);
    if (left_.empty() || low_.empty()) return {};
    std::vector<double> a = gather(predicted_, left_), b = gather(boxes_, low_);
    iou_low_ = iou_matrix(a.data(), left_.size(), b.data(), low_.size());
    solved_low_ = keep_if_one_to_one(iou_low_, left_, low_);
    return solved_low_ ? std::vector<float>() : iou_low_;
}

std::vector<int64_t> ByteTrack::finish(const std::vector<int64_t>& rows, const std::vector<int64_t>& cols) {
    const size_t n = confidence_.size();
    std::vector<int64_t> out(n, -1);
    if (tracks_.empty() && n == 0) return out;
    const size_t first = first_stage_;
    if (!solved_low_) keep_matches(iou_low_, rows, cols, left_, low_);
    for (size_t m = 0; m < match_track_.size(); ++m) {
        Track& t = tracks_[match_track_[m]];
        const double* z = &boxes_[4 * match_det_[m]];
        // Joseph-form update with H = [1, 0]: S = a + R, K = (a, c) / S
        const double a = t.cov[0], b = t.cov[1], c = t.cov[2], d = t.cov[3];
        const double inv_s = 1.0 / (a + kMeasurement);
        const double kp = a * inv_s, kv = c * inv_s, ikp = 1.0 - kp;
        for (int k = 0; k < 4; ++k) {
            const double innovation = z[k] - t.box[k];
            t.box[k] += kp * innovation;
            t.velocity[k] += kv * innovation;
        }
        const double ap00 = ikp * a, ap01 = ikp * b, ap10 = -kv * a + c, ap11 = -kv * b + d;
        t.cov[0] = ap00 * ikp + kp * kMeasurement * kp;
        t.cov[1] = (ap00 * -kv + ap01) + kp * kMeasurement * kv;
        t.cov[2] = ap10 * ikp + kv * kMeasurement * kp;
        t.cov[3] = (ap10 * -kv + ap11) + kv * kMeasurement * kv;
        t.missed = 0;
        t.streak += 1;
    }
    // ids in the order of the matches, the first stage's first
    for (size_t m = 0; m < match_track_.size(); ++m) {
        Track& t = tracks_[match_track_[m]];
        if (t.streak >= p_.minimum_consecutive_frames && t.id == -1) t.id = next_id_++;
        out[match_det_[m]] = t.id;
    }
    // new tracks from the confident detections no track took, in their order
    std::vector<bool> claimed(n, false);
    for (size_t m = 0; m < first; ++m) claimed[match_det_[m]] = true;
    for (size_t i : high_) {
        if (claimed[i] || !(confidence_[i] >= p_.track_activation_threshold)) continue;
        Track t{};
        for (int k = 0; k < 4; ++k) t.box[k] = boxes_[4 * i + k];
        t.cov[0] = t.cov[3] = 1.0;
        t.missed = 0, t.streak = 1, t.id = -1;
        tracks_.push_back(t);
    }
    // drop the tracks lost too long, and the unconfirmed ones that missed this frame
    tracks_.erase(std::remove_if(tracks_.begin(), tracks_.end(), [&](const Track& t) {
                      return !(t.missed <= p_.maximum_frames_without_update &&
                               (t.id != -1 || t.streak >= p_.minimum_consecutive_frames || t.missed == 0));
                  }),
                  tracks_.end());
    return out;
}

}  // namespace dn
