// A network built from a .cfg: its layers, their outputs, and a forward pass on one backend.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend.h"
#include "cfg.h"
#include "distributed/gradient_hook.h"
#include "gpu/device.h"
#include "layers/layer.h"
#include "layers/yolo.h"
#include "loss_scale.h"
#include "net_options.h"

namespace dn {

class Network {
public:
    // Parses and builds; throws DarknetError with file:line on any problem.
    Network(const std::string& cfg_path, const std::string& backend = "cpu");
    Network(const CfgFile& cfg, const std::string& backend = "cpu");

    // x: [n, channels, height, width]. Returns the output of every layer (index = layer).
    const LayerOutputs& forward(const Tensor& x);
    // The same from host memory holding shape s (NumPy arrays: no intermediate tensor) in storage type
    // `type`: fp32, or the network's precision (a half batch: uploaded as it is, half the bytes, and no
    // conversion on the device; DarknetError for another half type).
    const LayerOutputs& forward(const void* x, const Shape& s, DType type = DType::f32);
    // forward() from host memory for callers that want only the outputs of layers `keep`: with
    // forward_part > 0, on a device that uploads beside its work (Device::can_upload_ahead), a batch of
    // at least two parts of forward_part images runs part by part, part k+1 going up while part k runs,
    // so that the upload (a 64-image 416x416 fp32 batch is 133 MB: 2.4 ms of PCIe) hides behind the
    // work. The returned outputs then hold the kept layers (whole batch) alone. Parts are equal (a
    // recorded forward is of one shape); any other batch runs whole, as forward(). Parts of 16 by
    // default (DARKNET_PY_FORWARD_PART=<images> sets another, 0 runs whole batches): on an H200 the
    // batch-64 forward of the tiny models gained 2-30 %, yolov4's none (benchmarks/RESULTS_GPU.md).
    const LayerOutputs& forward_kept(const void* x, const Shape& s, DType type, const std::vector<int>& keep);
    int forward_part = default_forward_part();
    static int default_forward_part();

    // ---- training ----
    // Forward with training behaviour; zeroes every layer's delta for the following backward().
    const LayerOutputs& forward_train(const Tensor& x);
    const LayerOutputs& forward_train(const void* x, const Shape& s, DType type = DType::f32);
    // The batch size of the last forward_train while its training state (outputs, deltas, input) is
    // intact; 0 once forward(), resize_input() or set_backend() replaced it, or forward_train failed.
    int train_batch() const { return train_batch_; }
    // Throws DarknetError naming `what` and saying to call forward_train() first, unless train_batch() > 0.
    void require_training_state(const std::string& what) const;
    // dL/d(output) of each layer; the loss fills the heads' deltas between forward_train and backward.
    // Meaningful only while train_batch() > 0 (callers check require_training_state first).
    std::vector<Tensor>& deltas() { return deltas_; }
    const LayerOutputs& outputs() const { return outputs_; }
    // Back-propagates the deltas, accumulating parameter gradients (summed over the batch) until update().
    // Honours the layers' stopbackward / onlyforward (layers/training_options.h); stopbackward=N
    // counts the iterations completed as seen / batch, so a training loop keeps `seen` current.
    // reduce_gradients: this backward ends the iteration's accumulation, and gradient_hook (data-parallel
    // training) hears of each layer whose gradients are final, so that it reduces them across the ranks
    // while the backward goes on.
    void backward(bool reduce_gradients = false);
    // Set by data-parallel training (distributed/gradient_reducer.h); update() waits for it first.
    std::shared_ptr<GradientHook> gradient_hook;
    // Applies Darknet's SGD (or Adam when opt.adam) with learning rate lr, then clears the gradients.
    // `batch` is the number of images whose gradients were accumulated (batch x subdivisions in Darknet).
    // `t` is Adam's step count (Darknet: the iteration, so that a resumed run continues it); t <= 0
    // counts this network's updates instead. It is also the iteration that dont_update and
    // burnin_update compare with; each layer's rate is lr times its learning_rate option.
    // Returns false when fp16 training's gradients overflowed: the step was skipped (loss_scaler).
    // It waits for the step's overflow check (a 4-byte read after the backward): queue_update does not.
    bool update(float lr, int batch, int t = 0);
    // update() without waiting, for a loop that queues its next step while the device runs this one.
    // In fp16 training the device unscales and checks the gradients and its optimizer kernels skip
    // the step on an overflow by themselves; the host's loss_scaler learns the step's flag only when
    // learn_update_checks reads it (waiting only for the step's check, not for the work queued
    // since: Device::download_marked). Until then the scale stays what it was, so a step queued
    // before the host learnt of an overflow runs at the old scale: it most likely overflows too and
    // is skipped as well (LossScaler::after_check does not halve twice for it). The returned check
    // is filled when learnt; outside fp16 it is learnt at once.
    std::shared_ptr<const UpdateCheck> queue_update(float lr, int batch, int t = 0);
    // Reads the queued updates' overflow checks in the order they were queued, through `upto` (every
    // one when null), into loss_scaler. Throws DarknetError when fp16 training diverged.
    void learn_update_checks(const UpdateCheck* upto = nullptr);
    // Checks queued and not yet learnt.
    size_t pending_update_checks() const { return pending_checks_.size(); }
    // fp16 training's dynamic loss scaling (loss_scale.h); reset by set_precision and set_backend,
    // copied by clone.
    LossScaler loss_scaler;
    // What layer i's delta is held times: the loss scale below the [yolo] heads in fp16 training
    // (so their half values stay in range), 1 for the heads and in fp32 / bf16. Parameter gradients
    // carry the scale too between backward() and update().
    float delta_scale(size_t layer) const {
        if (!loss_scaler.dynamic || dynamic_cast<const YoloLayer*>(layers.at(layer).get())) return 1.0f;
        return loss_scaler.scale;
    }

    // Indices of the [yolo] layers; empty for a classifier.
    std::vector<int> yolo_layers() const;
    const YoloLayer& yolo(int layer_index) const;

    // Rebuilds the layers for a new input size keeping every parameter and the optimizer state
    // (Darknet's random=1 multi-scale training). Fails for cfgs whose parameter shapes depend on
    // the input size (e.g. [connected]).
    void resize_input(int width, int height);

    // Another network of the same cfg, input size and device that shares this one's parameter values
    // (no copy: N clones cost one copy of the weights). Each has its own activations, gradients and
    // optimizer state; the first write to the parameters of either (own_params) gives the writer its
    // own copy, so a clone never sees the other's changes.
    std::unique_ptr<Network> clone() const;
    // Makes the parameter values this network's alone (copies them while another network shares
    // them); called before anything that writes them, it also advances the values' version (what the
    // backend derives from them is made again). Callers that write through a pointer to the
    // parameters (live NumPy views) call it first.
    void own_params();
    // Held by every live NumPy view of the parameter values (the bindings' params() on a host backend):
    // its holder may write them at any time, unseen, so while one lives every pass counts as a new
    // version of the values (nothing derived from them is kept: tell_params_version).
    std::shared_ptr<const int> param_view_token() const { return param_views_; }
    bool shares_params() const { return param_share_.use_count() > 1; }
    // Allocates the parameters' gradients (zeroed) where they are not yet: training does it itself;
    // a network that only detects never holds them.
    void allocate_grads();

    // Held by callers that share one network between threads (the Python bindings): every call on a
    // network is made under it, so calls are serialized. The engine itself never takes it.
    mutable std::mutex call_mutex;

    // Storage type of the activations (src-lib/gpu/PRECISION.md): fp32, or fp16 / bf16 where the
    // backend runs them (GPU devices), for detection and training; parameters stay fp32, the [yolo] heads' outputs
    // are fp32. Throws DarknetError in one line naming what the backend runs, or the first layer
    // whose type has no half path. Training runs in it too: fp32 master parameters, gradients and
    // optimizer state; fp16 with dynamic loss scaling (loss_scaler).
    void set_precision(DType t);
    DType precision() const { return precision_; }
    // How the device holds the activations of a pass of `batch` images (tensor.h Layout): the
    // backend's preferred layout for the precision and batch (NHWC for bf16 on CUDA with cuDNN beyond
    // one image, src-lib/gpu/PRECISION.md "Layout"), where every layer has a channels-last path (conv,
    // max, local_avg, route, upsample, yolo); NCHW otherwise. DARKNET_PY_LAYOUT=nchw or nhwc (read at
    // the build, set_precision and set_backend) overrides the preference on a GPU device. Invisible to
    // callers: every host copy is NCHW.
    Layout layout(int batch) const;

    // Moves parameters and optimizer state to another backend (and its device); the precision goes
    // back to fp32 (set_precision after it for half).
    void set_backend(const std::string& name);
    void set_backend(std::unique_ptr<Backend> backend);
    const Backend& backend() const { return *backend_; }
    Backend& backend() { return *backend_; }

    // Darknet's layer table ("cfglayers"): index, type, filters/size, input -> output, BFLOPs.
    std::string layer_table() const;
    double total_bflops() const;

    // Per layer, the ops that ran on the CPU instead of the backend's device so far (GPU backends:
    // `darknet_py info --coverage`); empty lists on the CPU backends.
    const std::vector<std::set<std::string>>& fallback_ops() const { return fallback_ops_; }

    // Wall-clock milliseconds each layer took in the last forward pass (for profiling; zeros when the
    // pass was a replayed recording).
    const std::vector<double>& layer_ms() const { return layer_ms_; }

    // The cfg the layers were built from (at the current input size): sections[i + 1] built layers[i].
    // Exporters read layer options from it (darknet_py.export.onnx_model).
    const CfgFile& cfg() const { return cfg_; }

    // Recorded forwards (CUDA graphs): from the second forward of a shape on, on a device that can
    // record, the pass is recorded once and replayed (batch-1 latency is launch-bound). Off with
    // record_forwards = false or DARKNET_PY_GRAPHS=0. Whether the last forward was a replay:
    bool record_forwards = true;
    bool last_forward_replayed() const { return last_replayed_; }

    std::string cfg_path;
    NetOptions options;
    std::vector<std::unique_ptr<Layer>> layers;
    Warnings warnings;        // unused options etc., collected while building
    uint64_t seen = 0;        // images seen in training, stored in .weights

private:
    Network() = default;  // clone() fills it
    void build(const CfgFile& cfg);         // build_layers, then allocate_params
    void build_layers(const CfgFile& cfg);  // parses the options, makes the layers (no parameter memory)
    void allocate_params();  // every layer's parameter values, on the backend
    void check_input(const Shape& s) const;  // throws unless s matches the [net] input
    template <class F>
    void run_layer(size_t i, F&& f);          // f(), noting the ops that fell back to the CPU
    // Into input_ (training: train_input_), checked; host holds `host_type` values (fp32 or precision_).
    void load_input(const Tensor* x, const void* host, DType host_type, const Shape& s, bool training = false);
    const LayerOutputs& forward_loaded();     // forward() of input_
    const LayerOutputs& forward_train_loaded();
    void run_forward(const Shape& s);         // the layers of forward(), from input_
    bool replay_or_record(const Shape& s);    // true when the pass ran as a recording
    void forget_recording();                  // drops it; the next forwards of any shape may record again
    CfgFile cfg_;  // kept for resize_input
    std::unique_ptr<Backend> backend_;
    LayerOutputs outputs_;
    std::vector<double> layer_ms_;
    std::vector<std::set<std::string>> fallback_ops_;
    Tensor input_;             // forward()'s input (a recorded forward reads it from here)
    Tensor input_converted_;   // input_ in precision_ and layout_, converted by the forward itself (recorded with it)
    Tensor staged_parts_[2];   // forward_kept's parts as uploaded, in turn (one goes up while the other's part runs)
    LayerOutputs kept_outputs_;  // forward_kept's kept layers, whole batch, when it ran in parts
    DType precision_ = DType::f32;
    DType output_type(size_t layer) const;  // precision_, but fp32 for the [yolo] heads
    Layout layout_ = Layout::nchw;             // of the activations held now: layout(batch) of the last pass
    Layout output_layout(size_t layer) const;  // layout_, but NCHW for the [yolo] heads (decoded as such)
    void choose_layout();                      // reads DARKNET_PY_LAYOUT, checks the layers (layout())
    std::optional<Layout> layout_override_;    // DARKNET_PY_LAYOUT
    bool channels_last_ok_ = false;            // a device, and every layer runs channels last
    // Whether a loaded input is what layer 0 reads (precision_ and layout_: a half batch in NCHW layout), or
    // the forward converts it first (an fp32 batch for a half network, any batch for NHWC activations).
    bool input_ready(const Tensor& in) const { return in.dtype() == precision_ && in.layout() == layout_; }
    Tensor train_input_;       // forward_train()'s (backward of layer 0 reads it)
    Tensor train_input_converted_;  // train_input_ in precision_ and layout_ (then layer 0 reads this one)
    const Tensor& train_input() const { return input_ready(train_input_) ? train_input_ : train_input_converted_; }
    // fp16: every gradient unscaled and checked into a fresh 1-element flag, which is returned
    Tensor queue_overflow_check();
    struct PendingCheck {
        std::shared_ptr<UpdateCheck> check;
        Tensor found;                     // the step's overflow flag (unscale_check's found)
        std::shared_ptr<QueueMark> mark;  // the device's queue just after the check (null on the CPU)
        bool counted = false;             // the step advanced updates_ (update's t <= 0)
    };
    std::deque<PendingCheck> pending_checks_;  // queued updates whose flag the host has not read
    Tensor spare_train_input_; // the one before, while the next batch may go up ahead (load_input)
    bool last_load_uploaded_ = false;  // the last load_input came from the host
    std::unique_ptr<Recording> recording_;  // the recorded forward of recording_shape_, if any
    Shape recording_shape_;
    int eager_runs_ = 0;                    // forwards of recording_shape_ so far, not recorded
    bool last_replayed_ = false;
    std::vector<Tensor> deltas_;
    // Why the training state is gone (for require_training_state's message); train_batch_ = 0 then.
    void drop_training_state(const char* by);
    int train_batch_ = 0;
    std::string dropped_by_ = "nothing has run forward_train() yet";
    std::vector<std::vector<Tensor>> momentum_, adam_v_;  // optimizer state per layer and trainable
    int updates_ = 0;
    // One token per set of parameter buffers: networks sharing buffers (clone) hold the same token.
    std::shared_ptr<int> param_share_ = std::make_shared<int>(0);
    // Advanced by own_params, before every write of the values; the backend is told it before each pass
    // (Backend::set_params_version), and a recording of a forward holds for the version it was made at.
    uint64_t params_version_ = 1;
    uint64_t recording_params_version_ = 0;
    std::shared_ptr<int> param_views_ = std::make_shared<int>(0);  // param_view_token; new for a new backend
    void tell_params_version() {
        if (param_views_.use_count() > 1) ++params_version_;
        backend_->set_params_version(params_version_);
    }
};

}  // namespace dn
