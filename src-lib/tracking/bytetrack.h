// ByteTrack (python/darknet_py/tracking/bytetrack.py): trackers' ByteTrackTracker (Roboflow,
// Apache-2.0) step for step, at its fixed frame rate. Everything but the optimal assignment, which
// stays scipy's linear_sum_assignment, called from Python between the steps of a frame:
//   iou = begin(boxes, confidence)   predicts the tracks, IoU of every track with the confident detections
//   iou = second(rows, cols)         the first stage's assignment; IoU of the tracks left with the others
//   ids = finish(rows, cols)         the second stage's; Kalman updates, ids, new tracks, lost ones dropped
// so that a frame costs a handful of calls whatever the number of tracks. Where each track overlaps one
// detection at most and each detection one track (the usual frame), the assignment is known without the
// solver: begin or second returns an empty matrix and ignores the rows and cols it is then given.
// (The solver releases the GIL: in a video's threaded pipeline, taking it back cost about 2 ms a call.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dn {

struct Track {
    double box[4];       // x1, y1, x2, y2
    double velocity[4];
    // the 2x2 covariance block of each coordinate and its velocity (the 8x8 covariance is four equal
    // ones: no noise term couples two coordinates), by rows: (box, box), (box, velocity),
    // (velocity, box), (velocity, velocity); the library's 8x8 products form the two off-diagonal
    // entries apart, so both are kept
    double cov[4];
    int64_t missed;      // frames since the last match
    int64_t streak;      // matches in a row
    int64_t id;          // -1 until confirmed
};

struct ByteTrackParams {
    int64_t maximum_frames_without_update;
    int64_t minimum_consecutive_frames;
    float minimum_iou_threshold;   // compared in float32, as NumPy compares a float32 IoU with a Python float
    float high_conf_det_threshold;  // likewise with the float32 confidences
    double track_activation_threshold;  // compared in double, as the library compares float(confidence)
};

// IoU of each x1, y1, x2, y2 box of a with each of b, computed in double and rounded to float (0
// where the union is empty), as supervision's box_iou_batch, whose figures the library matches on.
std::vector<float> iou_matrix(const double* a, size_t na, const double* b, size_t nb);

class ByteTrack {
public:
    explicit ByteTrack(const ByteTrackParams& p) : p_(p) {}

    // A new frame: n boxes (x1, y1, x2, y2) and confidences. Returns IoU (tracks x confident detections).
    std::vector<float> begin(const float* boxes, const float* confidence, size_t n);
    // The first stage's assignment (rows: tracks, cols: confident detections, as the solver returns
    // them). Returns IoU (tracks left x the other detections); empty when either is empty.
    std::vector<float> second(const std::vector<int64_t>& rows, const std::vector<int64_t>& cols);
    // The second stage's assignment. Returns each detection's id (-1: none).
    std::vector<int64_t> finish(const std::vector<int64_t>& rows, const std::vector<int64_t>& cols);

    size_t size() const { return tracks_.size(); }
    size_t high_count() const { return high_.size(); }
    size_t left_count() const { return left_.size(); }
    size_t low_count() const { return low_.size(); }
    const std::vector<Track>& tracks() const { return tracks_; }

private:
    void keep_matches(const std::vector<float>& iou, const std::vector<int64_t>& rows,
                      const std::vector<int64_t>& cols, const std::vector<size_t>& track_of,
                      const std::vector<size_t>& det_of);
    // Where one_to_one holds (and the threshold is positive), keeps the stage's pairs at or above the
    // threshold without the solver and returns true; else false, nothing kept.
    bool keep_if_one_to_one(const std::vector<float>& iou, const std::vector<size_t>& track_of,
                            const std::vector<size_t>& det_of);

    ByteTrackParams p_;
    std::vector<Track> tracks_;
    int64_t next_id_ = 0;
    // the frame in hand
    std::vector<double> boxes_, predicted_;
    std::vector<float> confidence_;
    std::vector<size_t> high_, low_, left_, every_track_;  // every_track_: 0 .. tracks - 1
    std::vector<float> iou_high_, iou_low_;
    std::vector<size_t> match_track_, match_det_;  // both stages' matches, the first's first
    size_t first_stage_ = 0;                        // how many of them are the first stage's
    bool solved_high_ = false, solved_low_ = false;  // a stage whose assignment needed no solver
};

}  // namespace dn
