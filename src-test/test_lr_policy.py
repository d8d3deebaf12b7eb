"""Darknet's learning-rate policies (network.c get_current_rate) against values worked out by hand.

Each expected value below is computed on paper from Darknet's formula for that policy (written in
the comment), not by calling the code under test. The last tests read the policy options from a
real cfg through the engine's parser, which is where `scale`, `learning_rate_min`, `sgdr_cycle`
and `sgdr_mult` come from.
"""
import math
import random

import pytest

from darknet_py.training.lr_policy import LrSchedule


def approx(v):
    return pytest.approx(v, rel=1e-9, abs=1e-15)


def test_burn_in_applies_to_every_policy():
    # lr * (iteration / burn_in)^power while iteration < burn_in; Darknet's first update is iteration 1
    for policy, extra in [("constant", {}), ("steps", {"steps": [10], "scales": [0.1]}), ("exp", {"gamma": 0.5}),
                          ("poly", {"max_batches": 1000}), ("sgdr", {"max_batches": 1000})]:
        s = LrSchedule(learning_rate=0.01, policy=policy, burn_in=100, power=4, **extra)
        assert s.rate(0) == 0.0
        assert s.rate(1) == approx(0.01 * 1e-8)  # (1/100)^4
        assert s.rate(50) == approx(0.000625)  # 0.01 * 0.5^4
        assert s.rate(99) == approx(0.01 * 0.99 ** 4)


def test_burn_in_power():
    s = LrSchedule(learning_rate=0.1, burn_in=10, power=2)
    assert s.rate(5) == approx(0.025)  # 0.1 * (5/10)^2
    assert s.rate(10) == approx(0.1)  # burn-in is over at iteration == burn_in


def test_constant():
    s = LrSchedule(learning_rate=0.001, policy="constant")
    assert [s.rate(i) for i in (0, 1, 1000, 10 ** 6)] == [0.001] * 4


def test_steps():
    # the product of scales[i] over steps[i] <= iteration
    s = LrSchedule(learning_rate=0.1, policy="steps", steps=[100, 200], scales=[0.5, 0.1])
    assert s.rate(99) == approx(0.1)
    assert s.rate(100) == approx(0.05)
    assert s.rate(199) == approx(0.05)
    assert s.rate(200) == approx(0.005)
    assert s.rate(10 ** 6) == approx(0.005)


def test_steps_with_burn_in_then_a_scale_above_one():
    # yolov3-style: a scale > 1 raises the rate at its step
    s = LrSchedule(learning_rate=0.001, policy="steps", burn_in=10, power=4, steps=[10, 20], scales=[10, 0.1])
    assert s.rate(5) == approx(0.001 * 0.0625)
    assert s.rate(10) == approx(0.01)
    assert s.rate(20) == approx(0.001)


def test_step():
    # lr * scale^(iteration // step), integer division
    s = LrSchedule(learning_rate=0.1, policy="step", step=10, scale=0.5)
    assert s.rate(9) == approx(0.1)
    assert s.rate(10) == approx(0.05)
    assert s.rate(25) == approx(0.025)


def test_exp():
    s = LrSchedule(learning_rate=0.1, policy="exp", gamma=0.9)
    assert s.rate(3) == approx(0.0729)  # 0.1 * 0.9^3


def test_poly():
    # lr * (1 - iteration / max_batches)^power
    s = LrSchedule(learning_rate=0.1, policy="poly", power=2, max_batches=100)
    assert s.rate(50) == approx(0.025)
    assert s.rate(75) == approx(0.00625)
    assert s.rate(100) == 0.0


def test_sigmoid():
    # lr / (1 + exp(gamma * (iteration - step)))
    s = LrSchedule(learning_rate=0.1, policy="sigmoid", gamma=0.5, step=10)
    assert s.rate(10) == approx(0.05)
    assert s.rate(12) == approx(0.1 / (1 + math.e))
    assert s.rate(8) == approx(0.1 / (1 + 1 / math.e))


def test_random_draws_uniform_to_the_power():
    # lr * U(0,1)^power, a fresh draw each call
    s = LrSchedule(learning_rate=0.2, policy="random", power=2)
    ours, ref = random.Random(7), random.Random(7)
    for i in range(5):
        u = ref.random()
        assert s.rate(1000 + i, ours) == approx(0.2 * u * u)


def test_sgdr_cycles():
    # cosine from lr to learning_rate_min; cycles of 10, then 20, then 40 iterations; a cycle
    # runs while start + size >= iteration (Darknet's `while (start + size < n)`)
    s = LrSchedule(learning_rate=0.1, learning_rate_min=0.01, policy="sgdr", sgdr_cycle=10, sgdr_mult=2)
    half = 0.045  # (0.1 - 0.01) / 2
    assert s.rate(0) == approx(0.1)
    assert s.rate(5) == approx(0.01 + half)  # cos(pi/2) = 0
    assert s.rate(10) == approx(0.01)  # cos(pi): still the first cycle
    assert s.rate(11) == approx(0.01 + half * (1 + math.cos(math.pi / 20)))  # second cycle: start 10, size 20
    assert s.rate(20) == approx(0.01 + half)  # half way through the second cycle
    assert s.rate(30) == approx(0.01)
    assert s.rate(31) == approx(0.01 + half * (1 + math.cos(math.pi / 40)))  # third: start 30, size 40


def test_sgdr_cycle_defaults_to_max_batches():
    s = LrSchedule(learning_rate=0.1, learning_rate_min=0.0, policy="sgdr", max_batches=100)
    assert s.rate(50) == approx(0.05)


def test_bad_policy_and_missing_scales():
    with pytest.raises(ValueError, match="unknown learning-rate policy"):
        LrSchedule(policy="cosine")
    with pytest.raises(ValueError, match="as many scales"):
        LrSchedule(policy="steps", steps=[1, 2], scales=[0.1])


def _net(tmp_path, net_lines):
    from darknet_py import _core

    cfg = tmp_path / "p.cfg"
    cfg.write_text("[net]\nwidth=32\nheight=32\nchannels=3\nbatch=2\n" + net_lines +
                   "\n[convolutional]\nfilters=4\nsize=1\nstride=1\nactivation=linear\n")
    return _core.Net(str(cfg))


def test_options_read_from_a_cfg(tmp_path):
    net = _net(tmp_path, "learning_rate=0.02\npolicy=step\nstep=30\nscale=0.25\nburn_in=0\nmax_batches=100")
    assert not [w for w in net.warnings if "scale" in w]  # read, so not reported as unused
    s = LrSchedule.from_options(net.net_options())
    assert (s.policy, s.step, s.scale) == ("step", 30, 0.25)
    assert s.rate(65) == pytest.approx(0.02 * 0.0625, rel=1e-6)  # 0.25^2; the cfg's values are float32

    net = _net(tmp_path, "learning_rate=0.1\npolicy=sgdr\nlearning_rate_min=0.01\nsgdr_cycle=10\nsgdr_mult=3\n"
                         "max_batches=1000")
    s = LrSchedule.from_options(net.net_options())
    assert (s.learning_rate_min, s.sgdr_cycle, s.sgdr_mult) == (pytest.approx(0.01), 10, 3)
    assert s.rate(25) == pytest.approx(0.01 + 0.045, rel=1e-6)  # second cycle: start 10, size 30, half way

    net = _net(tmp_path, "policy=sgdr\nmax_batches=500")  # Darknet's defaults
    o = net.net_options()
    assert (o["sgdr_cycle"], o["sgdr_mult"], o["learning_rate_min"]) == (500, 2, pytest.approx(1e-5))
