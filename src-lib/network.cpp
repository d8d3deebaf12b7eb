#include "network.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "devices.h"

namespace dn {

Network::Network(const std::string& path, const std::string& backend) : backend_(make_backend(backend)) {
    build(parse_cfg_file(path));
}

Network::Network(const CfgFile& cfg, const std::string& backend) : backend_(make_backend(backend)) { build(cfg); }

void Network::build(const CfgFile& cfg) {
    build_layers(cfg);
    allocate_params();
}

void Network::build_layers(const CfgFile& cfg) {
    cfg_ = cfg;
    cfg_path = cfg.path;
    options = parse_net_options(cfg.sections[0]);
    Shape input = chw(options.channels, options.height, options.width);
    cfg.sections[0].check_size("", "the input", {(double)input.c, (double)input.h, (double)input.w});
    for (size_t i = 1; i < cfg.sections.size(); ++i) {
        const Section& s = cfg.sections[i];
        if (s.type == "net" || s.type == "network")
            throw DarknetError(s.file + ":" + std::to_string(s.line) + ": a second [net] section (only the first section may be [net])");
        BuildContext ctx{(int)layers.size(), input, layers};
        layers.push_back(make_layer(s, ctx));
        input = layers.back()->out;
        if (input.c <= 0 || input.h <= 0 || input.w <= 0)
            throw DarknetError(s.file + ":" + std::to_string(s.line) + ": [" + s.type + "] produces an empty output (" +
                               std::to_string(input.w) + "x" + std::to_string(input.h) + "x" + std::to_string(input.c) + ")");
        s.check_size("", "the output", {(double)input.c, (double)input.h, (double)input.w});
    }
    if (layers.empty()) throw DarknetError(cfg.path + ": the cfg has no layers after [net]");
    resolve_layer_training(layers);
    warn_unused_options(cfg, warnings);
    choose_layout();
}

void Network::allocate_params() {
    for (auto& l : layers)
        for (Param& p : l->params) {
            p.value = backend_->alloc(p.shape);
            backend_->fill(p.value, p.init);
        }
}

// Gradients only where training runs: a network (or clone) that only detects never holds them.
void Network::allocate_grads() {
    for (auto& l : layers)
        for (Param& p : l->params)
            if (p.has_grad && p.grad.empty()) {
                p.grad = backend_->alloc(p.shape);
                backend_->fill(p.grad, 0.0f);
            }
}

std::unique_ptr<Network> Network::clone() const {
    std::unique_ptr<Network> c(new Network());
    c->backend_ = make_backend(backend_->name());
    c->build_layers(cfg_);
    for (size_t i = 0; i < layers.size(); ++i)
        for (size_t k = 0; k < layers[i]->params.size(); ++k)
            c->layers[i]->params[k].value = c->backend_->adopt(layers[i]->params[k].value);
    c->warnings = warnings;
    c->seen = seen;
    c->record_forwards = record_forwards;
    c->precision_ = precision_;
    c->loss_scaler = loss_scaler;
    c->param_share_ = param_share_;
    return c;
}

void Network::own_params() {
    ++params_version_;  // what the backend derived from the values (and a recording that skips it) is stale
    tell_params_version();
    if (!shares_params()) return;
    for (auto& l : layers)
        for (Param& p : l->params) {
            Tensor mine = backend_->alloc(p.shape);
            copy_tensor(p.value, mine);
            p.value = mine;
        }
    param_share_ = std::make_shared<int>(0);
    forget_recording();  // a recorded forward reads the old buffers
}

void Network::set_backend(const std::string& name) { set_backend(make_backend(name)); }

// Layer types whose inference ops all take half activations (route, dropout and the other
// passthroughs copy channels); what else a cfg holds keeps a network in fp32.
static bool runs_in_half(const Layer& l) {
    static const std::set<std::string> types = {"conv", "max", "local_avg", "route", "upsample", "shortcut",
                                                "yolo", "dropout"};
    return types.count(l.type()) > 0;
}

void Network::set_precision(DType t) {
    if (t == precision_) return;
    std::vector<DType> runs = backend_->storage_types();
    if (std::find(runs.begin(), runs.end(), t) == runs.end()) {
        std::string names;
        for (DType r : runs) names += std::string(names.empty() ? "" : ", ") + dtype_name(r);
        throw DarknetError(std::string("precision ") + dtype_name(t) + " does not run on " + backend_->name() +
                           " (it runs: " + names + ")");
    }
    if (t != DType::f32)
        for (auto& l : layers)
            if (!runs_in_half(*l))
                throw DarknetError(std::string("precision ") + dtype_name(t) + ": layer " + std::to_string(l->index) +
                                   " [" + l->type() + "] has no half path yet (half runs conv, max, local_avg, route, "
                                   "upsample, shortcut, yolo, dropout); use fp32");
    learn_update_checks();  // the old policy hears of every queued step before it is reset
    precision_ = t;
    loss_scaler.reset(t);
    outputs_.clear();
    input_converted_ = Tensor();
    train_input_converted_ = Tensor();
    forget_recording();
    drop_training_state("set_precision() changed the activations' storage type");
    choose_layout();
}

void Network::choose_layout() {
    layout_override_.reset();
    if (const char* env = std::getenv("DARKNET_PY_LAYOUT"); env && *env && std::string(env) != "auto") {
        if (std::string(env) != "nchw" && std::string(env) != "nhwc")
            throw DarknetError(std::string("DARKNET_PY_LAYOUT='") + env + "': use nchw, nhwc or auto");
        layout_override_ = std::string(env) == "nhwc" ? Layout::nhwc : Layout::nchw;
    }
    channels_last_ok_ = backend_->device() != nullptr;  // host memory is NCHW only
    for (auto& l : layers)
        if (!l->runs_channels_last()) channels_last_ok_ = false;
}

Layout Network::layout(int batch) const {
    if (!channels_last_ok_) return Layout::nchw;
    return layout_override_ ? *layout_override_ : backend_->preferred_layout(precision_, batch);
}

Layout Network::output_layout(size_t layer) const {
    return dynamic_cast<const YoloLayer*>(layers[layer].get()) ? Layout::nchw : layout_;
}

DType Network::output_type(size_t layer) const {
    if (precision_ == DType::f32 || dynamic_cast<const YoloLayer*>(layers[layer].get())) return DType::f32;
    return precision_;
}

void Network::set_backend(std::unique_ptr<Backend> backend) {
    // Parameters and optimizer state move to the new backend's memory; activations are rebuilt.
    learn_update_checks();  // (their flags live on the old device)
    backend_ = std::move(backend);
    precision_ = DType::f32;
    loss_scaler.reset(precision_);
    input_converted_ = Tensor();
    train_input_converted_ = Tensor();
    for (auto& l : layers)
        for (Param& p : l->params) {
            p.value = backend_->adopt(p.value);
            if (!p.grad.empty()) p.grad = backend_->adopt(p.grad);
        }
    for (auto* state : {&momentum_, &adam_v_})
        for (auto& per_layer : *state)
            for (Tensor& t : per_layer)
                if (!t.empty()) t = backend_->adopt(t);
    if (backend_->device()) param_views_ = std::make_shared<int>(0);  // the views left are of the old host copies
    outputs_.clear();
    deltas_.clear();
    input_ = train_input_ = spare_train_input_ = Tensor();
    forget_recording();
    drop_training_state("set_backend() moved the network");
    choose_layout();
}

void Network::resize_input(int width, int height) {
    if (width == options.width && height == options.height) return;
    CfgFile cfg = cfg_;
    cfg.sections[0].options["width"] = CfgOption{std::to_string(width), cfg.sections[0].line, false};
    cfg.sections[0].options["height"] = CfgOption{std::to_string(height), cfg.sections[0].line, false};
    std::vector<std::unique_ptr<Layer>> old = std::move(layers);
    NetOptions old_options = options;
    Warnings old_warnings = warnings;
    layers.clear();
    try {
        build_layers(cfg);  // the parameters are the old ones, below
        for (size_t i = 0; i < layers.size(); ++i) {
            auto &from = old[i]->params, &to = layers[i]->params;
            for (size_t k = 0; k < from.size(); ++k) {
                if (from[k].shape != to[k].shape)
                    throw DarknetError("layer " + std::to_string(i) + " (" + old[i]->type() + ") has parameters that depend on the input size; cannot resize to " + std::to_string(width) + "x" + std::to_string(height));
                to[k].value = from[k].value;  // the same buffers: values and pending gradients carry over
                to[k].grad = from[k].grad;
            }
        }
    } catch (...) {
        layers = std::move(old);
        options = old_options;
        warnings = old_warnings;
        throw;
    }
    warnings = old_warnings;  // the rebuild repeats the cfg's warnings
    outputs_.clear();
    deltas_.clear();
    input_ = train_input_ = spare_train_input_ = Tensor();
    forget_recording();  // it refers to the old layers' buffers, even if a later resize comes back to its size
    drop_training_state("resize_input() rebuilt the layers");
}

void Network::forget_recording() {
    recording_.reset();
    recording_shape_ = Shape();
    eager_runs_ = 0;
}

void Network::drop_training_state(const char* by) {
    train_batch_ = 0;
    dropped_by_ = by;
}

void Network::require_training_state(const std::string& what) const {
    if (train_batch_ > 0 && deltas_.size() == layers.size() && outputs_.size() == layers.size()) return;
    throw DarknetError(what + " needs the training state of a forward_train(): call forward_train(x) first (" +
                       dropped_by_ + ")");
}

template <class F>
void Network::run_layer(size_t i, F&& f) {
    const std::map<std::string, int>* counts = backend_->fallback_counts();
    if (!counts) return f();
    std::map<std::string, int> before = *counts;
    f();
    if (fallback_ops_.size() < layers.size()) fallback_ops_.resize(layers.size());
    for (auto& [op, n] : *backend_->fallback_counts())
        if (n != before[op]) fallback_ops_[i].insert(op);
}

void Network::check_input(const Shape& s) const {
    if (s.n < 1) throw DarknetError("input batch is " + std::to_string(s.n) + ": give at least one image (Nx" +
                                    std::to_string(options.channels) + "x" + std::to_string(options.height) + "x" +
                                    std::to_string(options.width) + " with N >= 1)");
    if (s.c != options.channels || s.h != options.height || s.w != options.width)
        throw DarknetError("input is " + s.str() + " but the network expects Nx" + std::to_string(options.channels) +
                           "x" + std::to_string(options.height) + "x" + std::to_string(options.width));
}

// The input goes to one place that stays put: input_ for forward() (a recorded forward reads it
// there), train_input_ for forward_train() (backward of layer 0 reads it). Training batches from the
// host alternate between train_input_ and spare_train_input_ where the device can upload ahead:
// batch i+1 then goes up while batch i's backward, which reads batch i's input, still runs.
void Network::load_input(const Tensor* x, const void* host, DType host_type, const Shape& s, bool training) {
    check_input(s);
    if (host_type != DType::f32 && host_type != precision_)
        throw DarknetError(std::string("the input batch is in ") + dtype_name(host_type) + " but the network runs " +
                           dtype_name(precision_) + ": give fp32, or a half batch in the network's precision");
    // The input and then the outputs are replaced: forward_train's state (which backward() and the loss
    // read) is gone; forward_train_loaded restores it once every layer has run.
    drop_training_state("forward() or detect() since replaced its input and outputs");
    Tensor& dst = training ? train_input_ : input_;
    if (!host && x->on_host() && x->buffer() != dst.buffer()) host = x->data();
    Device* dev = backend_->device().get();
    bool ahead = false;
    if (training && host && dev && dev->can_upload_ahead()) {
        std::swap(train_input_, spare_train_input_);
        // Upload ahead only into a kept buffer (not just allocated) whose last use was queued before
        // the previous load, which was an upload: then Device::upload_ahead's promise holds.
        ahead = last_load_uploaded_ && dst.shape() == s && dst.dtype() == host_type;
    }
    // a batch from the host keeps its storage type on the device (a half one is what layer 0 reads)
    backend_->resize(dst, s, host ? host_type : x->dtype());
    if (ahead)
        dev->upload_ahead(dst.memory(), 0, host, s.size() * dtype_size(host_type));
    else if (host && host_type != DType::f32)  // precision_ is half: a GPU device
        dev->upload(dst.memory(), 0, host, s.size() * dtype_size(host_type));
    else if (host)
        copy_from_host(static_cast<const float*>(host), dst);
    else if (x->buffer() != dst.buffer())
        copy_tensor(*x, dst);
    last_load_uploaded_ = host != nullptr;
}

const LayerOutputs& Network::forward(const Tensor& x) {
    load_input(&x, nullptr, DType::f32, x.shape());
    return forward_loaded();
}

const LayerOutputs& Network::forward(const void* x, const Shape& s, DType type) {
    load_input(nullptr, x, type, s);
    return forward_loaded();
}

int Network::default_forward_part() {
    static const int part = [] {
        const char* env = std::getenv("DARKNET_PY_FORWARD_PART");
        return env && *env ? std::max(0, std::atoi(env)) : 16;
    }();
    return part;
}

// Equal parts only: the recorded forward is of one shape.
static int part_count(int n, int part) {
    if (part <= 0 || n < 2 * part) return 1;
    int k = (n + part - 1) / part;
    return n % k == 0 ? k : 1;
}

const LayerOutputs& Network::forward_kept(const void* x, const Shape& s, DType type, const std::vector<int>& keep) {
    Device* dev = backend_->device().get();
    int parts = dev && dev->can_upload_ahead() ? part_count(s.n, forward_part) : 1;
    if (parts == 1) return forward(x, s, type);
    check_input(s);
    const Shape ps{s.n / parts, s.c, s.h, s.w};
    const size_t part_bytes = ps.size() * dtype_size(type);
    const char* host = static_cast<const char*>(x);
    kept_outputs_.resize(layers.size());
    LayerOutputs kept(layers.size());  // the last call's buffers, reused
    for (int i : keep) kept[i] = std::move(kept_outputs_.at(i));
    kept_outputs_.swap(kept);
    // Both buffers before the first upload: upload_ahead may not go into memory allocated since the
    // previous upload (the allocator may hand out memory that queued work still reads).
    for (Tensor& t : staged_parts_) backend_->resize(t, ps, type);
    dev->upload(staged_parts_[0].memory(), 0, host, part_bytes);
    for (int k = 0; k < parts; ++k) {
        load_input(&staged_parts_[k % 2], nullptr, type, ps);  // a copy on the device, queued
        forward_loaded();
        for (int i : keep) {
            const Tensor& o = outputs_.at(i);
            Tensor& whole = kept_outputs_[i];
            if (k == 0) backend_->resize(whole, Shape{s.n, o.shape().c, o.shape().h, o.shape().w}, o.dtype(), o.layout());
            const size_t bytes = o.size() * dtype_size(o.dtype());
            dev->copy(o.memory(), 0, whole.memory(), k * bytes, bytes);
        }
        if (k + 1 == parts) break;
        // Beside part k's work: upload_ahead waits only for the work queued before the previous upload,
        // the part before (k - 1), which was the last to read this buffer.
        dev->upload_ahead(staged_parts_[(k + 1) % 2].memory(), 0, host + (k + 1) * part_bytes, part_bytes);
    }
    return kept_outputs_;
}

const LayerOutputs& Network::forward_loaded() {
    const Shape& s = input_.shape();
    outputs_.resize(layers.size());
    layer_ms_.assign(layers.size(), 0.0);
    deltas_.clear();  // a plain forward invalidates the training state of forward_train
    layout_ = layout(s.n);
    last_replayed_ = replay_or_record(s);
    if (!last_replayed_) run_forward(s);
    return outputs_;
}

void Network::run_forward(const Shape& s) {
    tell_params_version();
    const Tensor* in = &input_;
    if (!input_ready(input_)) {  // the input went up in fp32 (or NCHW) and is converted on the device
        backend_->resize(input_converted_, s, precision_, layout_);
        backend_->convert(input_, input_converted_);
        in = &input_converted_;
    }
    for (size_t i = 0; i < layers.size(); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        Layer& l = *layers[i];
        backend_->resize(outputs_[i], Shape{s.n, l.out.c, l.out.h, l.out.w}, output_type(i), output_layout(i));
        run_layer(i, [&] { l.forward(*backend_, *in, outputs_[i], outputs_); });
        in = &outputs_[i];
        layer_ms_[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
}

// The first forward of a shape runs normally (it allocates the outputs and temporaries a recording
// must find in place); the second is recorded and replayed; later ones replay. A recording is
// dropped when a buffer it uses is freed (a new shape, training, moved parameters: Recording::valid).
bool Network::replay_or_record(const Shape& s) {
    static const bool disabled = [] {
        const char* env = std::getenv("DARKNET_PY_GRAPHS");
        return env && std::string(env) == "0";
    }();
    Device* dev = backend_->device().get();
    if (!record_forwards || disabled || !dev) return false;
    if (recording_ && recording_shape_ == s && recording_->valid() && recording_params_version_ == params_version_) {
        recording_->replay();
        return true;
    }
    if (recording_shape_ != s || recording_) {  // a new shape, or an invalidated recording: start over
        recording_.reset();
        recording_shape_ = s;
        eager_runs_ = 0;
    }
    if (++eager_runs_ != 2) return false;  // only one attempt per shape: a failed one is not retried
    for (const auto& ops : fallback_ops_)
        if (!ops.empty()) return false;  // a CPU fallback needs the host in the middle of the pass
    if (!dev->begin_capture()) return false;
    recording_params_version_ = params_version_;  // it leaves out what the backend derived at this version
    run_forward(s);
    std::string why;
    recording_ = dev->end_capture(&why);
    if (!recording_) {
        std::fprintf(stderr, "darknet_py: forwards of %s are not recorded on %s: %s\n", s.str().c_str(),
                     dev->info().id.c_str(), why.c_str());
        return false;  // nothing of the recorded pass ran: the caller runs it normally
    }
    recording_->replay();
    return true;
}

const LayerOutputs& Network::forward_train(const Tensor& x) {
    load_input(&x, nullptr, DType::f32, x.shape(), true);
    return forward_train_loaded();
}

const LayerOutputs& Network::forward_train(const void* x, const Shape& s, DType type) {
    load_input(nullptr, x, type, s, true);
    return forward_train_loaded();
}

namespace {
// Data-parallel training runs forward_train and backward in lockstep on every rank, so the device's
// timed choices made there (cuDNN's algorithms) are made alike on every rank (Device::set_choice_agreement).
// Elsewhere (rank 0's --map, a user's inference) each device chooses alone.
class ChoiceAgreement {
public:
    ChoiceAgreement(const std::shared_ptr<Device>& device, GradientHook* hook) {
        auto sum = device && hook ? hook->sum_over_ranks() : nullptr;
        if (sum) device_ = device.get(), device_->set_choice_agreement(std::move(sum));
    }
    ~ChoiceAgreement() {
        if (device_) device_->set_choice_agreement(nullptr);
    }
    ChoiceAgreement(const ChoiceAgreement&) = delete;
    ChoiceAgreement& operator=(const ChoiceAgreement&) = delete;

private:
    Device* device_ = nullptr;  // the device told to agree, which is told to stop at the end
};
}  // namespace

const LayerOutputs& Network::forward_train_loaded() {
    ChoiceAgreement agree(backend_->device(), gradient_hook.get());
    own_params();  // batchnorm's rolling statistics are written
    allocate_grads();
    const Shape& s = train_input_.shape();
    drop_training_state("the last forward_train() failed");  // until every layer has run
    outputs_.resize(layers.size());
    deltas_.resize(layers.size());
    layout_ = layout(s.n);
    if (!input_ready(train_input_)) {  // as run_forward: converted on the device
        backend_->resize(train_input_converted_, s, precision_, layout_);
        backend_->convert(train_input_, train_input_converted_);
    }
    const Tensor* in = &train_input();
    for (size_t i = 0; i < layers.size(); ++i) {
        Layer& l = *layers[i];
        Shape os{s.n, l.out.c, l.out.h, l.out.w};
        backend_->resize(outputs_[i], os, output_type(i), output_layout(i));
        backend_->resize(deltas_[i], os, output_type(i), output_layout(i));
        backend_->fill(deltas_[i], 0.0f);
        run_layer(i, [&] { l.forward_train(*backend_, *in, outputs_[i], outputs_); });
        in = &outputs_[i];
    }
    train_batch_ = s.n;
    return outputs_;
}

void Network::backward(bool reduce_gradients) {
    require_training_state("backward()");
    GradientHook* hook = reduce_gradients ? gradient_hook.get() : nullptr;
    ChoiceAgreement agree(backend_->device(), gradient_hook.get());
    if (hook) hook->backward_begins();
    // Darknet's get_current_iteration: the iterations completed (the train loop keeps `seen`)
    long long iteration = options.batch > 0 ? (long long)(seen / (uint64_t)options.batch) : 0;
    for (int i = (int)layers.size() - 1; i >= 0; --i) {
        const LayerTraining& t = layers[i]->training;
        if (t.stopbackward == 1 || t.stopbackward > iteration) break;
        if (t.onlyforward) continue;
        const Tensor& x = i == 0 ? train_input() : outputs_[i - 1];
        Tensor* dx = i == 0 ? nullptr : &deltas_[i - 1];
        if (auto* head = dynamic_cast<YoloLayer*>(layers[i].get())) head->delta_scale = loss_scaler.scale;
        backend_->set_gradient_scale(delta_scale(i));
        run_layer(i, [&] { layers[i]->backward(*backend_, x, outputs_[i], deltas_[i], dx, outputs_, deltas_); });
        if (hook) hook->layer_done(i);
    }
    if (hook) hook->backward_ends();
}

// Darknet's batchnorm parameters: a normalised layer's scales and (its beta) biases.
static bool is_batchnorm_param(const Layer& l, const Param& p) {
    if (p.name != "scales" && p.name != "biases") return false;
    for (const Param& q : l.params)
        if (q.name == "rolling_mean") return true;
    return false;
}

// Loss scaling's half of the step: every gradient divided by the scale, and whether one of them holds
// an inf or NaN, into a flag of the step's own (a later step's check never writes it before it is
// read). The optimizer kernels read the flag where they run; every rank sees the same summed
// gradients, so every rank's device skips alike, and every host learns the same flag.
Tensor Network::queue_overflow_check() {
    Tensor found = backend_->alloc(Shape{1, 1, 1, 1});
    backend_->fill(found, 0.0f);
    for (auto& l : layers)
        for (Param& p : l->params)
            if (p.has_grad) backend_->unscale_check(p.grad, 1.0f / loss_scaler.scale, found);
    return found;
}

bool Network::update(float lr, int batch, int t) {
    std::shared_ptr<const UpdateCheck> check = queue_update(lr, batch, t);
    learn_update_checks(check.get());
    return check->applied;
}

void Network::learn_update_checks(const UpdateCheck* upto) {
    while (!pending_checks_.empty()) {
        PendingCheck p = std::move(pending_checks_.front());
        pending_checks_.pop_front();
        float found = 0.0f;
        if (p.found.on_host()) copy_to_host(p.found, &found);
        else p.found.device()->download_marked(p.mark.get(), p.found.memory(), 0, &found, sizeof found);
        p.check->applied = loss_scaler.after_check(found != 0.0f, p.check->scale);
        // a skipped step is no update (Adam's count, as update() had it); a step queued before this was
        // learnt counted it still (most likely skipped as well)
        if (!p.check->applied && p.counted) --updates_;
        p.check->next_scale = loss_scaler.scale;
        p.check->learnt = true;
        if (p.check.get() == upto) return;
    }
}

std::shared_ptr<const UpdateCheck> Network::queue_update(float lr, int batch, int t) {
    if (gradient_hook) gradient_hook->finish();  // every rank's gradients summed before the step
    own_params();
    allocate_grads();
    auto check = std::make_shared<UpdateCheck>();
    check->scale = check->next_scale = loss_scaler.scale;
    Tensor found;  // fp16: the overflow flag the optimizer kernels skip on
    if (loss_scaler.dynamic) {
        found = queue_overflow_check();
        Device* dev = found.device();
        pending_checks_.push_back(PendingCheck{check, found, dev ? dev->mark_queue() : nullptr, t <= 0});
    } else {
        check->learnt = true;
    }
    const Tensor* skip = loss_scaler.dynamic ? &found : nullptr;
    int step = t > 0 ? t : ++updates_;
    int iteration = step;  // the iteration being completed, 1-based (Darknet's iteration_num)
    momentum_.resize(layers.size());
    adam_v_.resize(layers.size());
    // Optimizer state (Darknet's *_updates, Adam's second moment) lives beside each parameter.
    auto state = [&](Tensor& t, const Shape& s) {
        if (t.size() == s.size()) return;
        t = backend_->alloc(s);
        backend_->fill(t, 0.0f);
    };
    for (size_t i = 0; i < layers.size(); ++i) {
        Layer& l = *layers[i];
        auto& params = l.params;
        momentum_[i].resize(params.size());
        adam_v_[i].resize(params.size());
        bool updates = layer_updates_at(l.training, iteration, options.burn_in);
        float layer_lr = lr * l.training.learning_rate_scale;
        for (size_t k = 0; k < params.size(); ++k) {
            Param& p = params[k];
            if (!p.has_grad) continue;
            // A layer that does not update drops its gradient (Darknet would keep accumulating it
            // into the momentum buffer and apply the sum at the first update: one huge step).
            if (!updates || (l.training.train_only_bn && !is_batchnorm_param(l, p))) {
                backend_->fill(p.grad, 0.0f);
                continue;
            }
            Tensor& m = momentum_[i][k];
            state(m, p.shape);
            float decay = p.decay ? options.decay : 0.0f;
            if (options.adam) {
                Tensor& v = adam_v_[i][k];
                state(v, p.shape);
                backend_->adam_update(p.value, p.grad, m, v, layer_lr, options.B1, options.B2, options.eps, decay, batch,
                                      step, skip);
            } else {
                backend_->sgd_update(p.value, p.grad, m, layer_lr, options.momentum, decay, batch, skip);
            }
        }
    }
    return check;
}

std::vector<int> Network::yolo_layers() const {
    std::vector<int> out;
    for (auto& l : layers)
        if (dynamic_cast<const YoloLayer*>(l.get())) out.push_back(l->index);
    return out;
}

const YoloLayer& Network::yolo(int i) const {
    auto* y = dynamic_cast<const YoloLayer*>(layers.at(i).get());
    if (!y) throw DarknetError("layer " + std::to_string(i) + " is not a yolo layer");
    return *y;
}

double Network::total_bflops() const {
    double t = 0;
    for (auto& l : layers) t += l->bflops();
    return t;
}

std::string Network::layer_table() const {
    std::string out;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%5s %-14s %-28s %-18s    %-18s %9s\n", "layer", "type", "params", "input", "output",
                  "BFLOPs");
    out += buf;
    auto dims = [](const Shape& s) {
        return std::to_string(s.w) + " x " + std::to_string(s.h) + " x " + std::to_string(s.c);
    };
    for (auto& l : layers) {
        std::snprintf(buf, sizeof buf, "%5d %-14s %-28s %-18s -> %-18s %9.3f\n", l->index, l->type(),
                      l->describe().c_str(), dims(l->in).c_str(), dims(l->out).c_str(), l->bflops());
        out += buf;
    }
    std::snprintf(buf, sizeof buf, "Total BFLOPS %.3f\n", total_bflops());
    out += buf;
    return out;
}

}  // namespace dn
