"""Asynchronous policy gradient (REINFORCE with a baseline) on CartPole, with
phalanx collectives doing the data movement.

    .venv/bin/python examples/rl/async_pg.py                 # 2 raylets, 4 simulators, 2 minutes
    .venv/bin/python examples/rl/async_pg.py --naive         # the trainer gets every gradient itself
    .venv/bin/python examples/rl/async_pg.py --nodes 3 --simulators 6 --k 3 --seconds 60

A trainer holds a small MLP policy; simulator actors, spread over the
raylets of an embedded cluster, each run CartPole episodes with the policy
they were given and return a gradient. The exchange:

  - policy -> simulators: one `phalanx.put` per update; every simulator reads
    that same ref (raylets on other nodes copy it once per node, through the
    object directory's receiver-driven broadcast);
  - gradients -> trainer: `phalanx.collective.reduce(in_flight, num_objects=k)`
    sums the first k gradients to arrive (the raylet adds them as they land,
    no unpickling); `reduced_inputs` says which, and only those simulators
    get the new policy. The others keep running on the policy they have:
    the trainer never waits for the slowest simulator.

Each gradient array also carries its batch's episode count, reward sum and
steps in its last three slots, so the same reduce sums the statistics.
Prints one progress line per update (episodes, mean reward, samples/s) and
writes the reward curve to a PNG (--png).
"""
import argparse
import os
import sys
import time

import numpy as np

import phalanx

STATS = 3  # trailing slots of a gradient: reward sum, episodes, steps


class Policy:
    """obs (4) -> tanh hidden -> logits (2), parameters in one float32 vector."""

    def __init__(self, hidden, obs=4, actions=2):
        self.shapes = [(hidden, obs), (hidden,), (actions, hidden), (actions,)]
        self.size = sum(int(np.prod(s)) for s in self.shapes)

    def unpack(self, flat):
        out, i = [], 0
        for s in self.shapes:
            n = int(np.prod(s))
            out.append(flat[i:i + n].reshape(s))
            i += n
        return out

    def init(self, rng):
        w1, b1, w2, b2 = (np.zeros(s, np.float32) for s in self.shapes)
        w1[:] = rng.normal(0, 1 / np.sqrt(w1.shape[1]), w1.shape)
        w2[:] = rng.normal(0, 0.01, w2.shape)
        return np.concatenate([w1.ravel(), b1, w2.ravel(), b2]).astype(np.float32)

    def forward(self, flat, obs):
        w1, b1, w2, b2 = self.unpack(flat)
        h = np.tanh(obs @ w1.T + b1)
        logits = h @ w2.T + b2
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return h, p / p.sum(axis=-1, keepdims=True)

    def grad_log_prob(self, flat, obs, actions, weights):
        """d/dtheta sum_t weights[t] * log pi(actions[t] | obs[t])."""
        w1, b1, w2, b2 = self.unpack(flat)
        h, p = self.forward(flat, obs)
        dlogits = -p
        dlogits[np.arange(len(actions)), actions] += 1.0
        dlogits *= weights[:, None]
        dz = (dlogits @ w2) * (1.0 - h * h)
        return np.concatenate([(dz.T @ obs).ravel(), dz.sum(0), (dlogits.T @ h).ravel(), dlogits.sum(0)])


@phalanx.remote
class Simulator:
    """Runs CartPole episodes with the policy it is given; returns a gradient."""

    def __init__(self, seed, hidden, gamma=0.99):
        import gymnasium as gym
        self.env = gym.make("CartPole-v1")
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.policy = Policy(hidden)
        self.gamma = gamma

    def rollout(self, params, min_steps):
        obs_all, act_all, ret_all, rewards = [], [], [], []
        steps = 0
        while steps < min_steps:
            obs, _ = self.env.reset(seed=int(self.rng.integers(1 << 31)))
            ep_obs, ep_act, ep_rew, done = [], [], [], False
            while not done:
                _, p = self.policy.forward(params, obs[None, :].astype(np.float32))
                a = int(self.rng.random() < p[0, 1])
                ep_obs.append(obs)
                ep_act.append(a)
                obs, r, terminated, truncated, _ = self.env.step(a)
                ep_rew.append(r)
                done = terminated or truncated
            g, ret = 0.0, np.zeros(len(ep_rew), np.float32)
            for t in range(len(ep_rew) - 1, -1, -1):
                g = ep_rew[t] + self.gamma * g
                ret[t] = g
            obs_all += ep_obs
            act_all += ep_act
            ret_all.append(ret)
            rewards.append(sum(ep_rew))
            steps += len(ep_rew)
        rets = np.concatenate(ret_all)
        adv = (rets - rets.mean()) / (rets.std() + 1e-8)
        grad = self.policy.grad_log_prob(params, np.asarray(obs_all, np.float32), np.asarray(act_all), adv)
        stats = [sum(rewards), len(rewards), steps]
        return np.concatenate([grad / steps, stats]).astype(np.float32)


class Adam:
    def __init__(self, size, lr):
        self.m, self.v, self.t, self.lr = np.zeros(size), np.zeros(size), 0, lr

    def step(self, params, grad):  # gradient ascent
        self.t += 1
        self.m = 0.9 * self.m + 0.1 * grad
        self.v = 0.999 * self.v + 0.001 * grad * grad
        mh, vh = self.m / (1 - 0.9 ** self.t), self.v / (1 - 0.999 ** self.t)
        return (params + self.lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)


def sum_gradients(in_flight, k, naive, timeout):
    """(summed gradient, the refs that went in): by phalanx.collective.reduce,
    or --naive: wait for k, get each, add them up in the trainer."""
    refs = list(in_flight)
    if naive:
        ready, _ = phalanx.wait(refs, num_returns=k, timeout=timeout)
        if len(ready) < k:
            raise TimeoutError(f"only {len(ready)} of {k} gradients within {timeout} s")
        return np.sum(phalanx.get(ready), axis=0), ready
    total = phalanx.collective.reduce(refs, op="sum", num_objects=k, timeout=timeout)
    return phalanx.get(total), phalanx.collective.reduced_inputs(total)


def write_png(path, curve, naive):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t, rewards = zip(*curve)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(t, rewards, lw=1, alpha=0.5, label="mean episode reward per update")
    window = max(1, min(10, len(rewards) // 5))
    smooth = np.convolve(rewards, np.ones(window) / window, mode="valid")
    ax.plot(t[window - 1:], smooth, lw=2, label=f"moving average ({window} updates)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("CartPole-v1 reward")
    ax.set_title("phalanx async policy gradient" + (" (naive gather)" if naive else " (collective.reduce)"))
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2, help="raylets in the embedded cluster")
    ap.add_argument("--simulators", type=int, default=4)
    ap.add_argument("--k", type=int, default=0, help="gradients per update (default: half the simulators)")
    ap.add_argument("--steps", type=int, default=1000, help="environment steps per rollout")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--seconds", type=float, default=120.0, help="stop after this long")
    ap.add_argument("--target", type=float, default=450.0, help="stop once the moving average reward reaches it")
    ap.add_argument("--naive", action="store_true", help="the trainer gets every gradient and sums them itself")
    ap.add_argument("--png", default="async_pg_reward.png")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    k = a.k or max(1, a.simulators // 2)
    if not 1 <= k <= a.simulators:
        ap.error(f"--k must be between 1 and --simulators ({a.simulators})")

    phalanx.init(num_nodes=a.nodes, num_cpus=2)
    policy = Policy(a.hidden)
    params = policy.init(np.random.default_rng(a.seed))
    adam = Adam(policy.size, a.lr)
    sims = [Simulator.options(resources={f"node:{i % a.nodes}": 1} if a.nodes > 1 else None)
            .remote(a.seed * 1000 + i, a.hidden) for i in range(a.simulators)]
    print(f"{a.simulators} simulators on {a.nodes} raylets, {k} gradients per update, "
          f"{'naive get' if a.naive else 'collective.reduce'}; policy {policy.size} parameters", flush=True)

    start = time.monotonic()
    policy_ref = phalanx.put(params)
    in_flight = {s.rollout.remote(policy_ref, a.steps): s for s in sims}
    curve, episodes, samples, update = [], 0, 0, 0
    while True:
        total, used = sum_gradients(in_flight, k, a.naive, timeout=120)
        grad, (reward_sum, n_ep, n_steps) = total[:-STATS], total[-STATS:]
        params = adam.step(params, grad / len(used))
        policy_ref = phalanx.put(params)
        for ref in used:  # only the simulators whose gradient went in get the new policy
            sim = in_flight.pop(ref)
            in_flight[sim.rollout.remote(policy_ref, a.steps)] = sim
        update += 1
        episodes += int(n_ep)
        samples += int(n_steps)
        elapsed = time.monotonic() - start
        curve.append((elapsed, reward_sum / n_ep))
        avg = np.mean([r for _, r in curve[-10:]])
        print(f"update {update:4d}  {elapsed:6.1f} s  episodes {episodes:6d}  reward {reward_sum / n_ep:6.1f} "
              f"(avg10 {avg:6.1f})  {samples / elapsed:8.0f} samples/s", flush=True)
        if elapsed > a.seconds or (len(curve) >= 10 and avg >= a.target):
            break
    first = np.mean([r for _, r in curve[:5]])
    last = np.mean([r for _, r in curve[-5:]])
    write_png(a.png, curve, a.naive)
    print(f"done: {update} updates, {episodes} episodes, {samples} samples in {elapsed:.1f} s "
          f"({samples / elapsed:.0f} samples/s); reward {first:.1f} (first 5 updates) -> {last:.1f} (last 5); "
          f"curve in {os.path.abspath(a.png)}", flush=True)
    phalanx.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
