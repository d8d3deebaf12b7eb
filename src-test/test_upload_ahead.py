"""The next training batch's upload overlapping the last batch's work (Device::upload_ahead, used by
Network::load_input). Training batches alternate between two input buffers; a batch goes up ahead
only into the buffer that no queued work still uses. The CUDA device runs such uploads on a second
stream; here a pocl device offers upload_ahead (as a plain upload) and checks the promise at every
call: no op since the previous upload used the buffer, and it was not allocated since."""
import numpy as np
import pytest

import gpu_devices
from darknet_py import _core
from darknet_py.training.init_weights import darknet_init
from test_train import small_cfg


def iteration(net, rng, size):
    x = rng.uniform(0, 1, (4, 3, size, size)).astype(np.float32)
    truths = [np.array([[*rng.uniform(0.2, 0.8, 2), *rng.uniform(0.1, 0.4, 2), rng.integers(2)]], np.float32)
              for _ in range(4)]
    net.forward_train(x, [])
    loss = sum(h["loss"] for h in net.yolo_loss(truths))
    net.backward()
    net.update(0.002, 4)
    return loss


def test_training_uploads_ahead_and_keeps_the_promise(tmp_path):
    device = gpu_devices.device("pocl")
    path = tmp_path / "net.cfg"
    path.write_text(small_cfg(classes=2, size=64, batch=4, filters=(8, 16), head=16))
    plain, ahead = _core.Net(str(path), device), _core.Net(str(path), device)
    for net in (plain, ahead):
        darknet_init(net, 1)
    checker = _core.upload_ahead_device(device)
    _core.run_network_on(ahead, checker.device)

    def run(steps, size, forward_at=None):
        for step in range(steps):
            losses = []
            for net in (plain, ahead):
                if step == forward_at:  # an inference pass between two training iterations
                    net.forward(np.full((4, 3, size, size), 0.5, np.float32), [])
                losses.append(iteration(net, np.random.default_rng([size, step]), size))
            assert losses[1] == pytest.approx(losses[0], rel=1e-6), (size, step, losses)

    # the first two batches allocate the two buffers (plain uploads); the third goes up ahead, also
    # after a plain forward in between (the forward's upload is then the previous upload)
    run(5, 64, forward_at=2)
    assert checker.notes() == []
    assert checker.calls().get("upload_ahead") == 3
    # a new input size: both buffers are allocated again first
    for net in (plain, ahead):
        net.resize_input(96, 96)
    run(3, 96)
    assert checker.calls().get("upload_ahead") == 4
    assert checker.notes() == []
    np.testing.assert_array_equal(ahead.params(0)["weights"], plain.params(0)["weights"])

