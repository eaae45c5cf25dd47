"""IMPALA with V-trace (Espeholt et al. 2018) on phalanx, PyTorch: simulator
actors run vectorised gymnasium environments, a learner actor trains with
V-trace and publishes each policy version as one ref that every simulator
reads.

    .venv/bin/python examples/rl/impala.py                       # CartPole-v1, a 1.1M-parameter policy
    .venv/bin/python examples/rl/impala.py --compare             # the same program on phalanx, then on Ray
    .venv/bin/python examples/rl/impala.py --ray                 # on Ray only (scripts/bench.sh installs it)
    .venv/bin/python examples/rl/impala.py --env Acrobot-v1 --target -100 --adv-norm --compare
    .venv/bin/python examples/rl/impala.py --kill-every 10       # a simulator killed every 10 s is replaced

The loop (the driver's):

  - each simulator runs `--envs` environments for `--unroll` steps with the
    policy it was given and returns the trajectory batch (observations,
    actions, rewards, ends, the behaviour policy's logits, the version);
  - as soon as a batch arrives its simulator gets the next rollout with the
    newest policy ref the driver has: simulators never wait for the learner;
  - once `--batches` batches are in and the learner is free, the learner's
    `update` gets them (the refs: the object layer moves the trajectories to
    the learner's node), drops those more than `--max-lag` versions behind
    (counted and reported), corrects the rest with V-trace, takes one Adam
    step, and returns the new policy as one ref. Every simulator that gets a
    rollout reads that ref: the object layer copies it to each node once
    (receiver-driven, pipelined chains), not once per reader.

Prints one line per interval (env steps/s, updates/s, mean episode reward,
policy lag, where the time went: simulate, transfer, learn) and a summary;
--json writes the figures, --png the learning curve. A simulator whose
process dies is replaced (the restart count is reported); --kill-every
kills one on purpose, as RLlib's crashing-CartPole example does.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

TRAJ_KEYS = ("obs", "actions", "rewards", "ends", "logits")


def check_env(env_id):
    """gymnasium's spec of env_id, or a clear error naming the environments that would do."""
    import gymnasium as gym
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        import difflib
        near = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
        raise ValueError(f"gymnasium {gym.__version__} has no environment {env_id!r}"
                         + (f" (did you mean {', '.join(near)}?)" if near else
                            " (e.g. CartPole-v1, Acrobot-v1, LunarLander-v3 with box2d installed)")) from None
    try:
        env = gym.make(env_id)
    except gym.error.DependencyNotInstalled as e:
        raise ValueError(f"{env_id} needs a package that is not installed ({e}); pip install '.[examples]' "
                         "installs Box2D and pygame for LunarLander") from None
    try:
        if not hasattr(env.action_space, "n") or len(env.observation_space.shape or ()) != 1:
            raise ValueError(f"{env_id}: this example needs a discrete action space and a flat observation "
                             f"(it has {env.action_space} and {env.observation_space})")
        return int(env.observation_space.shape[0]), int(env.action_space.n)
    finally:
        env.close()


def make_net(obs_dim, actions, hidden):
    """obs -> hidden -> hidden (tanh) -> policy logits and a value."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(obs_dim, hidden), torch.nn.Tanh(),
                                            torch.nn.Linear(hidden, hidden), torch.nn.Tanh())
            self.pi = torch.nn.Linear(hidden, actions)
            self.v = torch.nn.Linear(hidden, 1)
            with torch.no_grad():  # small initial logits: a near-uniform first policy
                self.pi.weight.mul_(0.01)

        def forward(self, x):
            h = self.body(x)
            return self.pi(h), self.v(h).squeeze(-1)

    return Net()


def parameters_of(net, on_device=False):
    """The parameters as one float32 vector: a policy version is one array
    (numpy; with `on_device`, a tensor on the net's device: on a GPU, a GPU
    object that phalanx keeps there and stages for the simulators)."""
    import torch
    flat = torch.nn.utils.parameters_to_vector(net.parameters()).detach()
    return flat if on_device else flat.cpu().numpy()


def load_parameters(net, flat):
    import torch
    torch.nn.utils.vector_to_parameters(torch.as_tensor(np.asarray(flat)), net.parameters())


class Simulator:
    """`envs` environments of env_id stepped together; returns trajectory batches."""

    def __init__(self, env_id, envs, unroll, hidden, seed):
        import gymnasium as gym
        import torch
        torch.set_num_threads(1)  # (phalanx sets this itself; Ray does not for an actor without CPUs)
        obs_dim, self.n_actions = check_env(env_id)
        self.env = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * envs,
                                            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.obs, _ = self.env.reset(seed=seed)
        self.net = make_net(obs_dim, self.n_actions, hidden)
        self.unroll, self.envs, self.version = unroll, envs, -1
        self.gen = torch.Generator().manual_seed(seed)
        self.ep_return = np.zeros(envs)

    def rollout(self, params, version, submitted):
        """One batch of `unroll` steps in every environment with policy
        `version`. `submitted`: the driver's clock when it asked (the wait
        before this starts is the transfer phase)."""
        import torch
        started = time.time()
        if version != self.version:
            load_parameters(self.net, params)
            self.version = version
        T, N = self.unroll, self.envs
        obs = np.zeros((T + 1, N) + self.obs.shape[1:], np.float32)
        actions = np.zeros((T, N), np.int64)
        rewards = np.zeros((T, N), np.float32)
        ends = np.zeros((T, N), np.float32)
        logits = np.zeros((T, N, self.n_actions), np.float32)
        returns = []
        with torch.no_grad():
            for t in range(T):
                obs[t] = self.obs
                lg, _ = self.net(torch.from_numpy(obs[t]))
                a = torch.multinomial(torch.softmax(lg, -1), 1, generator=self.gen).squeeze(-1).numpy()
                self.obs, r, term, trunc, _ = self.env.step(a)
                actions[t], rewards[t], logits[t] = a, r, lg.numpy()
                done = term | trunc  # a truncated episode is cut like a finished one (a small bias)
                ends[t] = done
                self.ep_return += r
                returns += self.ep_return[done].tolist()
                self.ep_return[done] = 0.0
        obs[T] = self.obs
        return {"obs": obs, "actions": actions, "rewards": rewards, "ends": ends, "logits": logits,
                "version": version, "returns": returns, "submitted": submitted, "started": started,
                "simulate_s": time.time() - started, "finished": time.time()}


def vtrace(behaviour_logits, target_logits, actions, rewards, discounts, values, bootstrap,
           rho_bar=1.0, c_bar=1.0):
    """V-trace targets and policy-gradient advantages (IMPALA, eq. 1), all
    [T, N] but the logits [T, N, A] and bootstrap [N]; no gradient flows."""
    import torch
    with torch.no_grad():
        log_rhos = (torch.log_softmax(target_logits, -1).gather(-1, actions[..., None]) -
                    torch.log_softmax(behaviour_logits, -1).gather(-1, actions[..., None])).squeeze(-1)
        rhos = torch.exp(log_rhos)
        clipped_rhos = torch.clamp(rhos, max=rho_bar)
        cs = torch.clamp(rhos, max=c_bar)
        next_values = torch.cat([values[1:], bootstrap[None]], 0)
        deltas = clipped_rhos * (rewards + discounts * next_values - values)
        acc = torch.zeros_like(bootstrap)
        vs_minus_v = torch.zeros_like(values)
        for t in range(values.shape[0] - 1, -1, -1):
            acc = deltas[t] + discounts[t] * cs[t] * acc
            vs_minus_v[t] = acc
        vs = vs_minus_v + values
        next_vs = torch.cat([vs[1:], bootstrap[None]], 0)
        advantages = clipped_rhos * (rewards + discounts * next_vs - values)
        return vs, advantages, rhos


class Learner:
    """The policy and its optimizer; one `update` per set of batches."""

    def __init__(self, obs_dim, actions, hidden, lr, max_lag, gamma, entropy, seed, device, adv_norm=False,
                 policy_on_device=False):
        import torch
        torch.manual_seed(seed)
        torch.set_num_threads(1)  # its one CPU (phalanx sets this too; Ray does by num_cpus)
        self.device = torch.device(device)
        self.net = make_net(obs_dim, actions, hidden).to(self.device)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.version, self.max_lag, self.gamma, self.entropy = 0, max_lag, gamma, entropy
        self.adv_norm, self.policy_on_device = adv_norm, policy_on_device

    def parameters(self):
        return parameters_of(self.net)

    def update(self, *batches):
        """(stats, the new policy): V-trace on the batches at most max_lag versions old."""
        import torch
        started = time.time()
        lags = [self.version - b["version"] for b in batches]
        fresh = [b for b, lag in zip(batches, lags) if lag <= self.max_lag]
        stats = {"lags": lags, "dropped": len(batches) - len(fresh), "version": self.version,
                 "arrived": [started - b["finished"] for b in batches]}
        if fresh:
            d = self.device
            cat = {k: torch.from_numpy(np.concatenate([b[k] for b in fresh], axis=1)).to(d) for k in TRAJ_KEYS}
            T = cat["actions"].shape[0]
            logits, values = self.net(cat["obs"])  # [T + 1, N, ...]: the last step only bootstraps
            vs, adv, rhos = vtrace(cat["logits"], logits[:T], cat["actions"], cat["rewards"],
                                   self.gamma * (1.0 - cat["ends"]), values[:T].detach(), values[T].detach())
            logp_all = torch.log_softmax(logits[:T], -1)
            logp = logp_all.gather(-1, cat["actions"][..., None]).squeeze(-1)
            if self.adv_norm:  # advantages of unit scale: the entropy bonus keeps its weight (long episodes)
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = -(logp * adv).mean()
            baseline_loss = 0.5 * ((vs - values[:T]) ** 2).mean()
            entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
            loss = pg_loss + 0.5 * baseline_loss - self.entropy * entropy
            self.opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), 40.0)
            self.opt.step()
            self.version += 1
            stats.update(loss=float(loss), entropy=float(entropy), rho=float(rhos.mean()),
                         steps=int(cat["actions"].numel()))
        stats.update(version=self.version, learn_s=time.time() - started, published=time.time())
        return stats, parameters_of(self.net, self.policy_on_device)


class Phalanx:
    """The runtime calls the driver makes, on phalanx. `connect=False`: a
    cluster this process is connected to already (bench/: emulated nodes)
    whose node k offers the resource `place(k)`."""
    name = "phalanx"

    def __init__(self, nodes, connect=True, place=lambda k: f"node:{k}"):
        import phalanx
        from phalanx.exceptions import ActorDiedError
        self.rt, self.nodes, self.place, self.classes = phalanx, nodes, place, {}
        if connect:
            phalanx.init(num_nodes=nodes, num_cpus=2)
        self.dead_errors = (ActorDiedError,)
        self.gpus = self.rt.cluster_resources().get("GPU", 0)

    def actor(self, cls, node, **opts):
        opts.setdefault("num_cpus", 0)
        if self.nodes > 1:
            opts["resources"] = {self.place(node % self.nodes): 1}
        if cls not in self.classes:  # (made once: a restarted simulator reuses its class)
            self.classes[cls] = self.rt.remote(cls)
        return self.classes[cls].options(**opts)

    def kill(self, actor):
        self.rt.kill(actor)


class Ray(Phalanx):
    """The same calls on Ray (a peer to measure against: `pip install ray`)."""
    name = "ray"

    def __init__(self, nodes, connect=True, place=None):
        import ray
        self.rt, self.classes = ray, {}
        self.nodes, self.place = (1, None) if connect else (nodes, place)
        if connect:
            ray.init(num_cpus=2 * nodes, include_dashboard=False, log_to_driver=False)
        self.dead_errors = (ray.exceptions.RayActorError,)
        self.gpus = ray.cluster_resources().get("GPU", 0)


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="CartPole-v1", help="a gymnasium environment with discrete actions")
    ap.add_argument("--nodes", type=int, default=2, help="raylets in the embedded cluster (phalanx)")
    ap.add_argument("--simulators", type=int, default=4)
    ap.add_argument("--envs", type=int, default=8, help="environments per simulator, stepped together")
    ap.add_argument("--unroll", type=int, default=50, help="steps per environment per batch")
    ap.add_argument("--batches", type=int, default=4, help="trajectory batches per learner update")
    ap.add_argument("--hidden", type=int, default=1024,
                    help="hidden units of each of the two layers (1024: 1.06M parameters, 4 MiB)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--entropy", type=float, default=0.01, help="entropy bonus")
    ap.add_argument("--adv-norm", action="store_true", help="normalise the advantages of each update (for tasks "
                    "with long episodes and large returns, such as Acrobot)")
    ap.add_argument("--queue", type=int, default=0, help="batches that may wait for the learner before "
                    "simulators are held back (default: 2 x --batches)")
    ap.add_argument("--max-lag", type=int, default=4, help="drop batches more than this many versions old")
    ap.add_argument("--seconds", type=float, default=300.0, help="stop after this long")
    ap.add_argument("--target", type=float, default=450.0,
                    help="stop once the mean reward of the last 100 episodes reaches it")
    ap.add_argument("--every", type=float, default=5.0, help="seconds between progress lines")
    ap.add_argument("--kill-every", type=float, default=0.0, help="kill a simulator every this many seconds")
    ap.add_argument("--device", default="auto", help="the learner's torch device: auto (cuda when the "
                    "cluster has a GPU), cpu or cuda")
    ap.add_argument("--policy-on-device", action="store_true", help="the learner publishes each policy as a "
                    "tensor on its device, not a numpy vector (on a GPU: a GPU object, docs/gpu.md)")
    ap.add_argument("--ray", action="store_true", help="run the same program on Ray")
    ap.add_argument("--compare", action="store_true", help="run on phalanx, then on Ray, and print a table")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--png", default="impala_reward.png", help="the learning curve ('' for none)")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def train(rt, a, first_sim=1):
    """The driver's loop on runtime `rt` (Phalanx or Ray). The learner is
    on node 0, simulators on nodes first_sim, first_sim + 1, ... (mod the
    nodes). Returns a dict of what it measured."""
    obs_dim, n_actions = check_env(a.env)
    device = a.device if a.device != "auto" else ("cuda" if rt.gpus else "cpu")
    learner = rt.actor(Learner, 0, num_cpus=1, num_gpus=1 if device.startswith("cuda") else 0).remote(
        obs_dim, n_actions, a.hidden, a.lr, a.max_lag, a.gamma, a.entropy, a.seed, device, a.adv_norm,
        a.policy_on_device)
    sims = {}
    restarts = 0

    def start_sim(i):
        sims[i] = rt.actor(Simulator, first_sim + i).remote(a.env, a.envs, a.unroll, a.hidden,
                                                            a.seed * 1000 + i + 100 * restarts)

    for i in range(a.simulators):
        start_sim(i)
    policy = rt.rt.get(learner.parameters.remote(), timeout=300)
    n_params = policy.size
    policy_ref, version = rt.rt.put(policy), 0
    del policy
    print(f"{rt.name}: IMPALA on {a.env}, {a.simulators} simulators x {a.envs} environments, learner on {device}; "
          f"policy {n_params:,} parameters ({n_params * 4 / 2**20:.1f} MiB)", flush=True)

    start = time.monotonic()
    rollout = lambda i: sims[i].rollout.remote(policy_ref, version, time.time())  # noqa: E731
    in_flight = {rollout(i): i for i in range(a.simulators)}
    queue = a.queue or 2 * a.batches
    idle = []  # simulators held back while --queue batches wait for the learner
    pending, update = [], None  # batches not yet given to the learner; (stats ref, policy ref) in progress
    returns, curve = [], []
    totals = {"steps": 0, "updates": 0, "dropped": 0, "batches": 0, "simulate_s": 0.0, "transfer_s": 0.0,
              "learn_s": 0.0, "to_learner_s": 0.0, "delivered": 0, "delivery_s": 0.0, "lag_sum": 0, "lags": 0}
    last_published = {}  # version -> the learner's clock when it returned it
    time_to_target = None
    next_report, next_kill = start + a.every, start + (a.kill_every or float("inf"))
    window_steps, window_start, line = 0, start, {}
    while True:
        waiting = list(in_flight) + ([update[0]] if update else [])
        ready, _ = rt.rt.wait(waiting, num_returns=1, timeout=120)
        if not ready:
            raise TimeoutError(f"no trajectory batch and no learner update for 120 s ({len(in_flight)} rollouts "
                               "in flight)")
        now = time.time()
        for ref in ready:
            if update and ref == update[0]:
                stats = rt.rt.get(ref, timeout=60)
                policy_ref, version = update[1], stats["version"]
                last_published[version] = stats["published"]
                update = None
                totals["updates"] += 1
                totals["dropped"] += stats["dropped"]
                totals["learn_s"] += stats["learn_s"]
                totals["to_learner_s"] += sum(stats["arrived"])
                totals["lag_sum"] += sum(stats["lags"])
                totals["lags"] += len(stats["lags"])
                line = stats if "loss" in stats else {**line, **stats}
                continue
            i = in_flight.pop(ref)
            try:
                batch = rt.rt.get(ref, timeout=60)
            except rt.dead_errors:
                restarts += 1
                print(f"  simulator {i} died; starting a new one (restart {restarts})", flush=True)
                start_sim(i)
                in_flight[rollout(i)] = i
                continue
            pending.append(ref)
            idle.append(i)
            steps = batch["actions"].size
            totals["steps"] += steps
            totals["batches"] += 1
            window_steps += steps
            totals["simulate_s"] += batch["simulate_s"]
            totals["transfer_s"] += batch["started"] - batch["submitted"]
            if batch["version"] in last_published:  # the first batch on this version: its delivery time
                totals["delivery_s"] += batch["started"] - last_published.pop(batch["version"])
                totals["delivered"] += 1
            returns += batch["returns"]
            del batch
        if update is None and len(pending) >= a.batches:
            refs, pending = pending[:a.batches], pending[a.batches:]
            update = learner.update.options(num_returns=2).remote(*refs)
        while idle and len(pending) < queue:
            i = idle.pop(0)  # back pressure: no more batches than the learner can take soon
            in_flight[rollout(i)] = i
        elapsed = time.monotonic() - start
        mean100 = float(np.mean(returns[-100:])) if returns else 0.0
        if returns:
            curve.append((elapsed, mean100))
        if time_to_target is None and len(returns) >= 100 and mean100 >= a.target:
            time_to_target = elapsed
        if a.kill_every and time.monotonic() >= next_kill:
            victim = int(np.random.default_rng(int(elapsed * 1000)).integers(a.simulators))
            print(f"  killing simulator {victim} (--kill-every)", flush=True)
            rt.kill(sims[victim])
            next_kill = time.monotonic() + a.kill_every
        done = time_to_target is not None or elapsed > a.seconds
        if time.monotonic() >= next_report or done:
            w = time.monotonic() - window_start
            lag = totals["lag_sum"] / max(1, totals["lags"])
            print(f"{elapsed:6.1f} s  {window_steps / w:8.0f} env steps/s  update {totals['updates']:5d} "
                  f"({totals['updates'] / elapsed:5.1f}/s)  reward {mean100:6.1f} ({len(returns)} episodes)  "
                  f"lag {lag:.2f}  dropped {totals['dropped']}  loss {line.get('loss', float('nan')):.3f}",
                  flush=True)
            window_steps, window_start, next_report = 0, time.monotonic(), time.monotonic() + a.every
        if done:
            break
    elapsed = time.monotonic() - start
    for ref in list(in_flight) + ([update[0]] if update else []):  # let the last calls end before shutdown
        try:
            rt.rt.wait([ref], timeout=30)
        except Exception:
            pass
    b, u = max(1, totals["batches"]), max(1, totals["updates"])
    result = {
        "system": rt.name, "env": a.env, "parameters": n_params, "policy_mib": n_params * 4 / 2**20,
        "simulators": a.simulators, "envs": a.envs, "device": device, "seconds": elapsed,
        "env_steps": totals["steps"], "env_steps_per_s": totals["steps"] / elapsed,
        "updates": totals["updates"], "updates_per_s": totals["updates"] / elapsed,
        "episodes": len(returns), "final_reward": float(np.mean(returns[-100:])) if returns else 0.0,
        "target": a.target, "time_to_target_s": time_to_target,
        "mean_lag": totals["lag_sum"] / max(1, totals["lags"]), "dropped": totals["dropped"],
        "restarts": restarts,
        # the phases: per batch (simulate, the wait before a rollout starts), per update (learn)
        "simulate_s_per_batch": totals["simulate_s"] / b, "transfer_s_per_batch": totals["transfer_s"] / b,
        "to_learner_s_per_batch": totals["to_learner_s"] / max(1, totals["lags"]),
        "learn_s_per_update": totals["learn_s"] / u,
        "policy_delivery_s": totals["delivery_s"] / max(1, totals["delivered"]),
        "bytes_policy": n_params * 4 * totals["batches"],
        "bytes_trajectories": totals["steps"] * 4 * (obs_dim + 3 + n_actions),
        "curve": curve[:: max(1, len(curve) // 400)],
    }
    print(f"done ({rt.name}): {totals['steps']:,} env steps in {elapsed:.1f} s ({result['env_steps_per_s']:,.0f}/s), "
          f"{totals['updates']} updates ({result['updates_per_s']:.1f}/s), reward {result['final_reward']:.1f} "
          + (f"(target {a.target:g} reached in {time_to_target:.1f} s)" if time_to_target else
             f"(target {a.target:g} not reached)")
          + f"; lag {result['mean_lag']:.2f}, dropped {totals['dropped']}, restarts {restarts}; per batch: simulate "
          f"{1000 * result['simulate_s_per_batch']:.0f} ms, transfer {1000 * result['transfer_s_per_batch']:.1f} ms, "
          f"to the learner {1000 * result['to_learner_s_per_batch']:.1f} ms; learn "
          f"{1000 * result['learn_s_per_update']:.0f} ms per update; a new policy reaches a simulator in "
          f"{1000 * result['policy_delivery_s']:.1f} ms", flush=True)
    return result


def write_png(path, results, env, target):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        if r["curve"]:
            t, v = zip(*r["curve"])
            ax.plot(t, v, lw=2, label=f"{r['system']} ({r['env_steps_per_s']:,.0f} env steps/s)")
    ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:g}")
    ax.set_xlabel("seconds")
    ax.set_ylabel(f"{env} mean reward (last 100 episodes)")
    ax.set_title(f"IMPALA, policy {results[0]['parameters']:,} parameters")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def print_table(results):
    print("| system | env steps/s | updates/s | reward | time to target | lag | dropped | restarts | "
          "simulate / transfer / learn (ms) | policy delivery (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        ttt = f"{r['time_to_target_s']:.1f} s" if r["time_to_target_s"] else "not reached"
        print(f"| {r['system']} | {r['env_steps_per_s']:,.0f} | {r['updates_per_s']:.1f} | {r['final_reward']:.1f} | "
              f"{ttt} | {r['mean_lag']:.2f} | {r['dropped']} | {r['restarts']} | "
              f"{1000 * r['simulate_s_per_batch']:.0f} / {1000 * r['transfer_s_per_batch']:.1f} / "
              f"{1000 * r['learn_s_per_update']:.0f} | {1000 * r['policy_delivery_s']:.1f} |")


def main(argv=None):
    ap = parser()
    a = ap.parse_args(argv)
    try:
        check_env(a.env)
    except ValueError as e:
        ap.error(str(e))
    if a.simulators < 1 or a.batches < 1 or a.envs < 1 or a.unroll < 1 or a.max_lag < 0:
        ap.error("--simulators, --batches, --envs and --unroll must be at least 1, --max-lag at least 0")
    systems = ["phalanx", "ray"] if a.compare else ["ray"] if a.ray else ["phalanx"]
    results = []
    for system in systems:
        if system == "ray":
            import ray.cloudpickle
            ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        else:
            import cloudpickle
            cloudpickle.register_pickle_by_value(sys.modules[__name__])
        rt = (Ray if system == "ray" else Phalanx)(a.nodes)
        try:
            results.append(train(rt, a))
        finally:
            rt.rt.shutdown()
    if len(results) > 1:
        print()
        print_table(results)
    if a.png:
        write_png(a.png, results, a.env, a.target)
        print(f"learning curve: {os.path.abspath(a.png)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
