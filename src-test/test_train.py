"""Training end to end: convergence from random initialisation, weights that load back, resume,
NaN handling, atomic writes and the `train` command.

The convergence test is the one that takes time (about a minute on 2 cores): a small detector
trained from Darknet's random initialisation on a synthetic set must reach mAP@0.5 >= 0.5 on its
valid images, measured by the mAP code (evaluate.py) on images it never trained on. The others use
a tiny network on 64x64 images and run a few iterations each.
"""
import glob
import importlib.util
import os

import numpy as np
import pytest

import darknet_py
from darknet_py import _core
from darknet_py.training.checkpoint import atomic_write, save_weights_atomic
from darknet_py.data.synth import generate
from darknet_py.training.train import StopTraining, TrainingDiverged, train


def small_cfg(classes=1, size=128, batch=16, lr=0.01, burn_in=50, max_batches=300, filters=(8, 16, 32, 64),
              head=64, anchors="16,16, 28,28, 44,44", momentum=0.9, extra=""):
    """A plain detector: 3x3 conv + maxpool stages, one [yolo] head at stride 2^len(filters)."""
    s = (f"[net]\nbatch={batch}\nsubdivisions=1\nwidth={size}\nheight={size}\nchannels=3\nmomentum={momentum}\n"
         f"decay=0.0005\nlearning_rate={lr}\nburn_in={burn_in}\nmax_batches={max_batches}\npolicy=steps\n"
         f"steps={int(max_batches * 0.8)},{int(max_batches * 0.9)}\nscales=.1,.1\nhue=.05\nsaturation=1.3\n"
         f"exposure=1.3\n{extra}\n")
    for f in filters:
        s += (f"\n[convolutional]\nbatch_normalize=1\nfilters={f}\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
              "\n[maxpool]\nsize=2\nstride=2\n")
    s += f"\n[convolutional]\nbatch_normalize=1\nfilters={head}\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    s += f"\n[convolutional]\nsize=1\nstride=1\npad=1\nfilters={3 * (5 + classes)}\nactivation=linear\n"
    s += (f"\n[yolo]\nmask=0,1,2\nanchors={anchors}\nclasses={classes}\nnum=3\njitter=.2\nignore_thresh=.7\n"
          "truth_thresh=1\nrandom=0\n")
    return s


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 40-image 64x64 dataset and a tiny cfg (batch 4): a few iterations take well under a second."""
    root = tmp_path_factory.mktemp("tiny")
    data = generate(str(root / "ds"), images=40, classes=2, size=(64, 64), seed=5, valid_fraction=0.25, workers=1)
    cfg = root / "tiny.cfg"
    cfg.write_text(small_cfg(classes=2, size=64, batch=4, lr=0.002, burn_in=0, max_batches=1000, filters=(8, 16),
                             head=16, anchors="8,8, 14,14, 22,22"))
    return {"data": data, "cfg": str(cfg), "root": root}


def all_params(net):
    return np.concatenate([v.ravel() for i in range(len(net.layers())) for v in net.params(i).values()])


def weights_floats(path):
    return np.fromfile(path, np.float32, offset=20)  # after the 20-byte header (major, minor, revision, seen64)


def run(tiny, out, **kw):
    kw.setdefault("seed", 3)
    kw.setdefault("workers", 1)
    return train(tiny["data"], tiny["cfg"], out_dir=str(out), quiet=True, chart=False, **kw)


# ---- convergence ----------------------------------------------------------------------------
def test_converges_from_random_initialisation(tmp_path):
    """From Darknet's random initialisation, 300 iterations of 16 images (128x128, one class) reach
    mAP@0.5 >= 0.5 on held-out images. Measured on 2 cores: 0.79-0.87 over seeds, 50-100 s."""
    data = generate(str(tmp_path / "ds"), images=400, classes=1, size=(128, 128), seed=11, valid_fraction=0.15)
    cfg = tmp_path / "conv.cfg"
    cfg.write_text(small_cfg(classes=1, max_batches=300))
    r = train(data, str(cfg), seed=1, out_dir=str(tmp_path / "backup"), quiet=True, calc_map=True, map_every=1000)
    assert r.iteration == 300 and r.final and os.path.isfile(r.final)
    first, last = r.losses[0][2], r.losses[-1][2]
    assert last < first / 10, f"the average loss went from {first} to {last} only"
    # the mAP measured at the end of training, and again from the weights file by the map code
    assert r.maps and r.maps[-1][0] == 300
    result = darknet_py.compute_map(data, str(cfg), r.final, progress=False)
    assert result.map == pytest.approx(r.maps[-1][1], abs=1e-9)
    assert result.map >= 0.5, f"mAP@0.5 {result.map:.3f} after 300 iterations"
    assert r.best and r.best_map == pytest.approx(result.map)


# ---- weights written by training ------------------------------------------------------------
def test_trained_weights_load_back_with_identical_outputs(tiny, tmp_path):
    r = run(tiny, tmp_path, max_batches=5)
    assert r.iteration == 5 and os.path.isfile(r.final) and os.path.isfile(r.last)
    x = np.random.default_rng(0).random((2, 3, 64, 64), np.float32)
    heads = list(r.net.yolo_layers)
    trained = r.net.forward(x, heads)
    loaded = darknet_py.Network(tiny["cfg"], r.final)
    again = loaded.forward(x)
    for a, b in zip(trained, again):
        np.testing.assert_array_equal(a, b)
    assert np.array_equal(weights_floats(r.final), all_params(r.net))
    header = darknet_py.Network(tiny["cfg"]).load_weights(r.final)
    assert header["seen"] == 5 * 4  # iterations x batch
    # training changed the weights: they are not the initialisation any more
    r0 = run(tiny, tmp_path / "zero", max_batches=1)
    assert not np.array_equal(weights_floats(r0.final), weights_floats(r.final))


def test_same_seed_same_run_other_seed_other_run(tiny, tmp_path):
    a = run(tiny, tmp_path / "a", max_batches=3, seed=7)
    b = run(tiny, tmp_path / "b", max_batches=3, seed=7)
    c = run(tiny, tmp_path / "c", max_batches=3, seed=8)
    assert np.array_equal(weights_floats(a.final), weights_floats(b.final))
    assert not np.array_equal(weights_floats(a.final), weights_floats(c.final))


# ---- resume ---------------------------------------------------------------------------------
def test_resume_continues_where_it_stopped(tiny, tmp_path):
    """2K iterations in one run, and K then K more resumed from `_last.weights`, end with the same
    weights: the resumed run continues at iteration K + 1 with the same rates and the same batches.
    Exactly the same with momentum=0; Darknet does not store the momentum in .weights, so with
    momentum a resumed run restarts it from zero (checked below: close, not equal)."""
    K = 8
    cfg0 = tmp_path / "tiny.cfg"
    cfg0.write_text(open(tiny["cfg"]).read().replace("momentum=0.9", "momentum=0"))
    t0 = dict(tiny, cfg=str(cfg0))
    whole_rates = {}
    whole = run(t0, tmp_path / "whole", max_batches=2 * K, callback=lambda s: whole_rates.update({s["iteration"]: s["rate"]}))
    half = run(t0, tmp_path / "split", max_batches=K)
    assert half.iteration == K
    seen_iters, rates = [], {}

    def cb(s):
        seen_iters.append(s["iteration"])
        rates[s["iteration"]] = s["rate"]

    resumed = run(t0, tmp_path / "split", max_batches=2 * K, weights=half.last, callback=cb)
    assert resumed.start_iteration == K and seen_iters == list(range(K + 1, 2 * K + 1))
    assert rates == {i: whole_rates[i] for i in range(K + 1, 2 * K + 1)}
    np.testing.assert_array_equal(weights_floats(resumed.final), weights_floats(whole.final))

    # --clear restarts the count from the same weights
    cleared = run(t0, tmp_path / "clear", max_batches=2, weights=resumed.final, clear=True)
    assert cleared.start_iteration == 0 and cleared.iteration == 2


def test_resume_with_momentum_stays_close(tiny, tmp_path):
    """With momentum 0.9 the resumed run restarts the momentum (as Darknet does): after K more
    iterations it is closer to the uninterrupted run than to where both started the second half."""
    K = 30
    whole = run(tiny, tmp_path / "whole", max_batches=2 * K)
    half = run(tiny, tmp_path / "split", max_batches=K)
    mid = weights_floats(half.last)  # read now: the resumed run writes its own _last there
    resumed = run(tiny, tmp_path / "split", max_batches=2 * K, weights=half.last)
    a, b = weights_floats(whole.final), weights_floats(resumed.final)
    gap, travel = np.linalg.norm(a - b), np.linalg.norm(a - mid)
    assert gap < 0.5 * travel, f"resumed run ends {gap:.3g} from the uninterrupted one, which moved {travel:.3g}"


def test_resume_past_max_batches_is_an_error(tiny, tmp_path):
    r = run(tiny, tmp_path, max_batches=2)
    with pytest.raises(ValueError, match="already trained to iteration 2"):
        run(tiny, tmp_path, max_batches=2, weights=r.final)


def test_callback_stops_early_and_saves_last(tiny, tmp_path):
    def stop(s):
        assert s["net"].seen == s["iteration"] * 4 and len(s["heads"]) == 1
        if s["iteration"] == 3:
            raise StopTraining()

    r = run(tiny, tmp_path, max_batches=50, callback=stop)
    assert r.stopped and r.iteration == 3 and r.final is None
    assert darknet_py.Network(tiny["cfg"]).load_weights(r.last)["seen"] == 12
    r = run(tiny, tmp_path / "false", max_batches=50, callback=lambda s: s["iteration"] < 2)
    assert r.stopped and r.iteration == 2


def test_ctrl_c_saves_last_and_stops(tiny, tmp_path):
    def interrupt(s):
        if s["iteration"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tiny, tmp_path, max_batches=50, callback=interrupt)
    last = os.path.join(str(tmp_path), "tiny_last.weights")
    assert darknet_py.Network(tiny["cfg"]).load_weights(last)["seen"] == 3 * 4
    assert not os.path.exists(os.path.join(str(tmp_path), "tiny_final.weights"))


def test_subdivisions_accumulate_batch_images_per_iteration(tiny, tmp_path):
    """batch=4, subdivisions=2: two passes of 2 images, one update over 4 (seen grows by 4)."""
    cfg = tmp_path / "sub.cfg"
    cfg.write_text(open(tiny["cfg"]).read().replace("subdivisions=1", "subdivisions=2"))
    stats = []
    r = train(tiny["data"], str(cfg), out_dir=str(tmp_path), max_batches=3, seed=1, workers=1, quiet=True, chart=False,
              callback=lambda s: stats.append((s["images"], sum(h["count"] for h in s["heads"]), s["net"].seen)))
    assert [(i, seen) for i, _, seen in stats] == [(4, 4), (8, 8), (12, 12)]
    assert all(n > 0 for _, n, _ in stats)  # the heads' object counts add up over both passes
    assert darknet_py.Network(str(cfg)).load_weights(r.final)["seen"] == 12


def test_multiscale_picks_a_size_every_10_iterations(tiny, tmp_path):
    cfg = tmp_path / "ms.cfg"
    cfg.write_text(open(tiny["cfg"]).read().replace("random=0", "random=1"))
    sizes = []

    def record(s):  # max_batches 300, stopped at 40: Darknet also uses the largest size for the last 100
        sizes.append((s["width"], s["height"]))
        return s["iteration"] < 40

    train(tiny["data"], str(cfg), out_dir=str(tmp_path), max_batches=300, seed=2, workers=1, quiet=True, chart=False,
          callback=record)
    blocks = [sizes[i:i + 10] for i in range(0, 40, 10)]
    assert all(len(set(b)) == 1 for b in blocks), sizes  # one size per 10 iterations
    assert blocks[0][0] == (128, 128)  # Darknet starts at the largest: round(1.4 * 64 / 32 + 1) * 32
    assert all(w % 32 == 0 and 64 <= w <= 128 and w == h for w, h in sizes)
    assert len(set(sizes)) > 1
    # multiscale=False keeps the cfg's size
    fixed = []
    train(tiny["data"], str(cfg), out_dir=str(tmp_path), max_batches=3, seed=2, workers=1, quiet=True, chart=False,
          multiscale=False, callback=lambda s: fixed.append((s["width"], s["height"])))
    assert fixed == [(64, 64)] * 3


def test_weights_of_the_first_layers_only(tiny, tmp_path):
    """A pretrained prefix (like yolov4-tiny.conv.29) loads its layers; the rest stay initialised."""
    from darknet_py.training.train import weights_layers_in_file

    full = run(tiny, tmp_path / "full", max_batches=2).final
    net = _core.Net(tiny["cfg"])
    first_two = sum(v.size for i in range(2) for v in net.params(i).values())
    prefix = tmp_path / "prefix.weights"
    prefix.write_bytes(open(full, "rb").read()[:20 + 4 * first_two])
    assert weights_layers_in_file(net, str(prefix)) == 2
    assert weights_layers_in_file(net, full) == -1
    r = run(tiny, tmp_path / "from_prefix", max_batches=1, weights=str(prefix), clear=True)
    assert r.iteration == 1
    broken = tmp_path / "broken.weights"
    broken.write_bytes(open(full, "rb").read()[:20 + 4 * first_two + 8])
    with pytest.raises(ValueError, match="ends inside layer 2"):
        run(tiny, tmp_path / "broken", max_batches=1, weights=str(broken))


# ---- NaN / Inf ------------------------------------------------------------------------------
def poison(at):
    """A callback that puts a NaN into the biases of the conv layer feeding the [yolo] head."""
    def cb(s):
        if s["iteration"] == at:
            net = s["net"]
            net.params(net.yolo_layers[0] - 1)["biases"][0] = np.nan
    return cb


def test_nan_loss_stops_and_keeps_the_last_good_weights(tiny, tmp_path):
    good = run(tiny, tmp_path, max_batches=4)
    before = open(good.last, "rb").read()
    with pytest.raises(TrainingDiverged, match=r"iteration 6: the loss is nan") as e:
        run(tiny, tmp_path, max_batches=20, weights=good.last, callback=poison(5))
    assert "tiny_last.weights" in str(e.value) or e.value.last_good is None
    assert open(good.last, "rb").read() == before
    assert not os.path.exists(os.path.join(str(tmp_path), "tiny_final.weights")) or \
        np.isfinite(weights_floats(os.path.join(str(tmp_path), "tiny_final.weights"))).all()
    assert not glob.glob(os.path.join(str(tmp_path), "*.tmp")) and not glob.glob(os.path.join(str(tmp_path), ".*.tmp"))


def test_nan_parameters_are_never_saved(tiny, tmp_path):
    good = run(tiny, tmp_path, max_batches=3)
    before = open(good.last, "rb").read()
    # poisoned at the last iteration: the loss of that iteration was fine, the save must refuse
    with pytest.raises(TrainingDiverged, match="NaN or Inf") as e:
        run(tiny, tmp_path, max_batches=6, weights=good.last, callback=poison(6))
    assert e.value.iteration == 6
    assert open(good.last, "rb").read() == before


def test_huge_learning_rate_diverges_cleanly(tiny, tmp_path):
    cfg = tmp_path / "hot.cfg"
    cfg.write_text(open(tiny["cfg"]).read().replace("learning_rate=0.002", "learning_rate=1e12"))
    with pytest.raises(TrainingDiverged, match="diverged"):
        train(tiny["data"], str(cfg), out_dir=str(tmp_path), max_batches=50, seed=1, workers=1, quiet=True, chart=False)
    for f in glob.glob(os.path.join(str(tmp_path), "*.weights")):
        assert np.isfinite(weights_floats(f)).all(), f


# ---- atomic writes --------------------------------------------------------------------------
def test_atomic_write_replaces_whole_files_or_nothing(tmp_path):
    target = tmp_path / "x.weights"
    target.write_bytes(b"old complete file")

    def half_then_fail(tmp):
        with open(tmp, "wb") as f:
            f.write(b"new but incomp")
        raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="simulated"):
        atomic_write(str(target), half_then_fail)
    assert target.read_bytes() == b"old complete file"
    assert os.listdir(tmp_path) == ["x.weights"]  # no temporary file left behind

    with pytest.raises(KeyboardInterrupt):  # a Ctrl-C while writing leaves the old file too
        atomic_write(str(target), lambda tmp: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert target.read_bytes() == b"old complete file" and os.listdir(tmp_path) == ["x.weights"]

    atomic_write(str(target), lambda tmp: open(tmp, "wb").write(b"new complete file"))
    assert target.read_bytes() == b"new complete file" and os.listdir(tmp_path) == ["x.weights"]
    assert (os.stat(target).st_mode & 0o777) == 0o666 & ~_umask()


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_save_weights_atomic_writes_a_loadable_file(tiny, tmp_path):
    net = _core.Net(tiny["cfg"])
    net.params(0)["weights"][...] = 0.25
    net.seen = 1234
    path = save_weights_atomic(net, str(tmp_path / "w.weights"))
    assert os.listdir(tmp_path) == ["w.weights"]
    other = _core.Net(tiny["cfg"])
    assert other.load_weights(path)["seen"] == 1234
    assert (other.params(0)["weights"] == 0.25).all()


# ---- the command ----------------------------------------------------------------------------
def test_cli_train_writes_the_expected_files(tiny, tmp_path, capsys):
    import cv2

    from darknet_py.commands.cli import main

    out = tmp_path / "backup"
    code = main(["train", tiny["data"], tiny["cfg"], "--max-batches", "4", "--save-every", "2", "--out", str(out),
                 "--seed", "1", "--map", "--workers", "1"])
    assert code == 0
    files = sorted(os.listdir(out))
    events = ["tensorboard"] if importlib.util.find_spec("tensorboardX") else []  # (where it is installed)
    assert files == ["chart.png", "plots", "results.csv"] + events + ["tiny_2.weights", "tiny_4.weights",
                                                                      "tiny_best.weights", "tiny_final.weights",
                                                                      "tiny_last.weights"]
    from darknet_py.evaluation.plots import PLOT_FILES

    assert sorted(os.listdir(out / "plots")) == sorted(PLOT_FILES)  # the best weights' evaluation plots
    stdout = capsys.readouterr().out
    lines = [ln for ln in stdout.splitlines() if " avg loss, " in ln]
    assert [ln.split(":")[0] for ln in lines] == [" 1", " 2", " 3", " 4"]  # Darknet's line starts with a space
    assert "4 images" in lines[0] and "16 images" in lines[-1] and "hours left" in lines[0]
    assert "mean_average_precision (mAP@0.50)" in stdout
    chart = cv2.imread(str(out / "chart.png"))
    assert chart is not None and chart.shape[0] > 100
    # the final weights are the ones of iteration 4 (seen = 16)
    assert darknet_py.Network(tiny["cfg"]).load_weights(str(out / "tiny_final.weights"))["seen"] == 16


def test_cli_train_reports_a_missing_data_file(tmp_path, capsys):
    from darknet_py.commands.cli import main

    assert main(["train", str(tmp_path / "none.data"), "yolov4-tiny.cfg"]) == 1
    assert "none.data" in capsys.readouterr().err
