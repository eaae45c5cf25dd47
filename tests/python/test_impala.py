"""examples/rl/impala.py: V-trace against a direct computation, and the
example run as a newcomer would run it (short, fixed seed): it learns,
writes its figures, replaces killed simulators and rejects a bad env."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import phalanx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "rl", "impala.py")
sys.path.insert(0, os.path.join(ROOT, "examples", "rl"))
torch = pytest.importorskip("torch")
import impala  # noqa: E402


def test_vtrace_on_policy_is_the_bootstrapped_discounted_return():
    """With the behaviour policy the target policy, every rho is 1: vs_t is
    r_t + gamma_t * vs_{t+1}, ending in the bootstrap value, and the
    advantage is r_t + gamma_t vs_{t+1} - V(x_t)."""
    rng = np.random.default_rng(1)
    T, N, A = 7, 3, 4
    logits = torch.tensor(rng.normal(size=(T, N, A)), dtype=torch.float32)
    actions = torch.tensor(rng.integers(0, A, (T, N)))
    rewards = torch.tensor(rng.normal(size=(T, N)), dtype=torch.float32)
    ends = rng.random((T, N)) < 0.2
    discounts = torch.tensor(0.9 * (1 - ends), dtype=torch.float32)
    values = torch.tensor(rng.normal(size=(T, N)), dtype=torch.float32)
    bootstrap = torch.tensor(rng.normal(size=N), dtype=torch.float32)
    vs, adv, rhos = impala.vtrace(logits, logits, actions, rewards, discounts, values, bootstrap)
    expect = np.zeros((T, N))
    nxt = bootstrap.numpy().astype(np.float64)
    for t in range(T - 1, -1, -1):
        expect[t] = rewards[t].numpy() + discounts[t].numpy() * nxt
        nxt = expect[t]
    np.testing.assert_allclose(rhos.numpy(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(vs.numpy(), expect, rtol=1e-5, atol=1e-5)
    next_vs = np.concatenate([expect[1:], bootstrap.numpy()[None]], 0)
    np.testing.assert_allclose(adv.numpy(), rewards.numpy() + discounts.numpy() * next_vs - values.numpy(),
                               rtol=1e-5, atol=1e-5)


def test_vtrace_clips_off_policy_importance_weights():
    """A target policy far from the behaviour one: rho = pi/mu is clipped at
    rho_bar in the advantage, and vs moves from V only by clipped terms."""
    T, N, A = 4, 2, 2
    behaviour = torch.zeros(T, N, A)
    target = torch.zeros(T, N, A)
    target[..., 0] = 5.0  # pi(0) ~ 0.993 where mu(0) = 0.5: rho ~ 1.99
    actions = torch.zeros(T, N, dtype=torch.long)
    rewards = torch.ones(T, N)
    discounts = torch.full((T, N), 0.5)
    values = torch.zeros(T, N)
    vs, adv, rhos = impala.vtrace(behaviour, target, actions, rewards, discounts, values, torch.zeros(N),
                                  rho_bar=1.0, c_bar=1.0)
    assert float(rhos.min()) > 1.9
    # clipped at 1: the on-policy returns of reward 1 with discount 0.5
    np.testing.assert_allclose(vs[:, 0].numpy(), [1.875, 1.75, 1.5, 1.0], rtol=1e-5)


def run_example(tmp_path, *args, timeout=240):
    phalanx.shutdown()  # the example starts its own cluster
    out = subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True, timeout=timeout,
                         cwd=tmp_path)
    return out


def test_impala_learns_cartpole_and_writes_its_figures(tmp_path):
    out = run_example(tmp_path, "--hidden", "64", "--lr", "3e-3", "--batches", "2", "--seconds", "90", "--target",
                      "150", "--every", "2", "--json", "r.json", "--png", "r.png")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "env steps/s" in out.stdout and "lag" in out.stdout
    r = json.loads((tmp_path / "r.json").read_text())["results"][0]
    for field in ("env_steps_per_s", "updates_per_s", "final_reward", "time_to_target_s", "mean_lag", "dropped",
                  "restarts", "simulate_s_per_batch", "transfer_s_per_batch", "learn_s_per_update",
                  "policy_delivery_s", "bytes_policy", "curve"):
        assert field in r, field
    assert r["system"] == "phalanx" and r["env_steps"] > 10_000 and r["updates"] > 10
    # a random CartPole policy scores about 22: it learned
    assert r["time_to_target_s"] is not None and r["final_reward"] >= 150, r["final_reward"]
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_impala_replaces_a_killed_simulator_and_finishes(tmp_path):
    out = run_example(tmp_path, "--hidden", "32", "--seconds", "8", "--kill-every", "2", "--every", "2",
                      "--json", "r.json", "--png", "")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    r = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert r["restarts"] >= 2, out.stdout[-2000:]
    assert "died; starting a new one" in out.stdout
    assert r["updates"] > 5


def test_impala_names_an_environment_gymnasium_does_not_have(tmp_path):
    out = run_example(tmp_path, "--env", "CartPoel-v1", timeout=60)
    assert out.returncode == 2
    assert "has no environment 'CartPoel-v1'" in out.stderr and "CartPole-v1" in out.stderr
