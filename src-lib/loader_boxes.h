// The training loader's box arithmetic for one image: Darknet's fill_truth_detection + correct_boxes
// (data.c) after the random crop, as data/augment.py's correct_truth states it. It was written in NumPy,
// some 45 calls on arrays of a few boxes (80 us alone, 170 inside a sample, whose pixel work had evicted
// NumPy's code and data); here it is one pass over the boxes with the same float32 operations in the
// same order (loader_boxes.cpp is built without fused multiply-adds), so the same bits.
#pragma once

namespace dn {

// Where one image's crop lies (augment.CropParams, in source pixels) and the sizes it maps between.
struct BoxCrop {
    int pleft, ptop, swidth, sheight;  // the crop rectangle (it may reach outside the image)
    bool flip;                         // mirrored left to right after the crop
    int ow, oh;                        // the source image
    int net_w, net_h;                  // the network input
};

// boxes: n rows of class, cx, cy, w, h (float32, normalised to the source image) in the order Darknet
// shuffled them. The first max_boxes of them (a negative max_boxes: all but the last -max_boxes, as a
// Python slice) are moved into the crop, mirrored when flipped and clipped to [0, 1]; those wholly
// outside the source image or at x = y = 0, and those narrower or lower than one network pixel, are
// dropped. The kept rows go to out (room for n rows), same layout; returns how many.
int correct_boxes(const float* boxes, int n, const BoxCrop& crop, int max_boxes, float* out);

}  // namespace dn
