"""plan_step: what to recompute or offload so that a PyTorch training step's peak allocated bytes meet a budget, chosen
on the estimate of the step (estimate_step's accounting), verified by estimating the step again with the plan
applied, and returned as a StepPlan that applies itself to the user's model (plan_apply) or saves itself as JSON."""
import json
from collections import Counter

from ._lib import MemplanTorchError
from .plan_apply import AppliedPlan, check_model, fingerprint, model_structure
from .plan_capture import capture_step
from .plan_policy import GPU_SPEEDS, analyze, choose_regions, decisions, ladder_steps
from .plan_simulate import TraceSimulator

FORMAT = "memplan.step_plan/1"


class BudgetUnreachable(MemplanTorchError):
    """No plan meets the budget; `closest_peak_bytes` is the lowest estimated peak found, `strategy` how."""

    def __init__(self, message, closest_peak_bytes, strategy):
        super().__init__(message)
        self.closest_peak_bytes, self.strategy = closest_peak_bytes, strategy


class StepPlan:
    """A plan for one training step: `policy` is its JSON form (docs/torch.md, "plan_step")."""

    def __init__(self, policy):
        if policy.get("format") != FORMAT:
            raise MemplanTorchError(f"not a memplan step plan (format {policy.get('format')!r}, expected {FORMAT!r})")
        self.policy = policy

    @property
    def estimated_peak_bytes(self):
        return self.policy["estimated_peak_bytes"]

    @property
    def budget_bytes(self):
        return self.policy["budget_bytes"]

    def summary(self):
        return dict(self.policy["summary"])

    def apply(self, model, *, offload=True, offload_copy=None, compiled=False):
        """A context manager that runs the model's forward under the plan while entered:
        `with plan.apply(model): train...`. `offload=False` keeps offloaded tensors on the device;
        `compiled=True` leaves offload out and checkpoints regions as torch.compile traces them."""
        return AppliedPlan(self.policy, model, offload=offload, copy=offload_copy, compiled=compiled)

    def wrap(self, model, **kw):
        """Applies the plan to `model` for good and returns it."""
        AppliedPlan(self.policy, model, **kw).install()
        return model

    def check(self, model):
        """Raises PlanMismatch when `model` is not the model this plan was made for."""
        check_model(self.policy, model)

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.policy, f, indent=1, sort_keys=True)
            f.write("\n")

    def __repr__(self):
        s = self.policy["summary"]
        return (f"StepPlan(budget={self.budget_bytes}, estimated_peak={self.estimated_peak_bytes}, "
                f"recomputed_ops={s['recomputed_op_calls']}, offloaded_bytes={s['offloaded_bytes']})")


def load_plan(path):
    with open(path) as f:
        return StepPlan(json.load(f))


# The estimate's error on the GPU: the plan's estimated peak must be at most budget * (1 - MARGIN). On the bench's
# decoders (H200, 2026-11-28; bench/results/plan_step_h200_2026-11-28/) the measured peak of every applied plan was
# within +0.1% of its estimate.
MARGIN = 0.005


def plan_step(model, example_inputs, *, loss_fn, targets=(), optimizer=None, autocast_dtype=None, budget,
              gpu="h100", allow_offload=True, prefetch=2, max_estimates=12, margin=MARGIN, compiled=False):
    """The cheapest plan found whose estimated step peak (estimate_step's peak_allocated_bytes, what
    torch.cuda.max_memory_allocated reports) is at most `budget` bytes. Raises BudgetUnreachable naming the lowest
    peak reached when no plan meets it. The plan is the shortest prefix of a fixed ladder of actions (plan_policy)
    whose verified peak meets the budget less `margin` (a fraction of it, for the estimate's error), so a smaller
    budget never gives a larger planned peak. `compiled=True` plans for torch.compile (plan.wrap(model,
    compiled=True), then torch.compile): selective checkpointing costs no host time there, and nothing is offloaded.
    Planner plans several budgets on one capture."""
    return Planner(model, example_inputs, loss_fn=loss_fn, targets=targets, optimizer=optimizer,
                   autocast_dtype=autocast_dtype, gpu=gpu, allow_offload=allow_offload, prefetch=prefetch,
                   max_estimates=max_estimates, margin=margin, compiled=compiled).plan(budget)


class Planner:
    """One capture of the step and its ladder; plan(budget) for each budget, sharing the verified estimates (so
    the planned peaks of its budgets are monotonic in the budget)."""

    def __init__(self, model, example_inputs, *, loss_fn, targets=(), optimizer=None, autocast_dtype=None,
                 gpu="h100", allow_offload=True, prefetch=2, max_estimates=12, margin=MARGIN, compiled=False):
        if not 0 <= margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {margin!r}")
        self.margin = margin
        gpu_key = str(gpu).lower()
        if gpu_key not in GPU_SPEEDS:
            raise ValueError(f"unknown gpu {gpu!r}: one of {', '.join(sorted(GPU_SPEEDS))}")
        speed = GPU_SPEEDS[gpu_key]
        self.model, self.example_inputs = model, example_inputs
        self.allow_offload, self.prefetch, self.max_estimates = allow_offload, prefetch, max_estimates
        self.est_kw = dict(loss_fn=loss_fn, targets=targets, optimizer=optimizer, autocast_dtype=autocast_dtype,
                           gpu=gpu)
        self.cap = capture_step(model, example_inputs, speed, **self.est_kw)
        self.baseline = self.cap.estimate["peak_allocated_bytes"]
        self.regions = choose_regions(self.cap, model)
        self.scopes = analyze(self.cap, self.regions)
        self.actions, ends = ladder_steps(self.cap, self.scopes, speed, allow_offload, compiled)
        self.taken = [0] + ends  # actions taken by the first j steps
        rows = model_structure(model)
        self.head = {"format": FORMAT, "fingerprint": fingerprint(rows), "structure": rows, "gpu": gpu_key,
                     "baseline_peak_bytes": self.baseline, "for_compile": bool(compiled),
                     "autocast_dtype": str(autocast_dtype).replace("torch.", "") if autocast_dtype else None}
        self.verified = {0: self.baseline}
        self.sim = None

    def policy_for(self, j):
        """The policy of the ladder's first j steps."""
        p = dict(self.head)
        p.update(decisions(self.cap, self.scopes, self.regions, self.actions[:self.taken[j]], self.prefetch))
        return p

    def simulator(self):
        if self.sim is None:
            self.sim = TraceSimulator(self.cap, self.scopes, self.actions)
        return self.sim

    def simulated(self, j):
        return self.simulator().peak(self.taken[j])

    def peak(self, k):
        """The estimated peak with the ladder's first k steps applied (estimate_step on fake tensors)."""
        from .estimate import estimate_step

        if k not in self.verified:
            with AppliedPlan(self.policy_for(k), self.model, host_invisible=True):
                self.verified[k] = estimate_step(self.model, self.example_inputs, **self.est_kw)["peak_allocated_bytes"]
        return self.verified[k]

    def plan(self, budget):
        """The plan for `budget` bytes: its estimated peak at most budget * (1 - margin)."""
        requested = int(budget)
        budget = int(requested * (1 - self.margin))
        n = len(self.taken) - 1
        k = 0 if self.baseline <= budget else _search(self.peak, self.verified, self.simulated, n, budget,
                                                         self.max_estimates)
        if k is None:
            for j in (n // 2, (3 * n) // 4):  # the ladder's peak need not fall all the way: look inside it too
                self.peak(j)
            best = min(self.verified, key=lambda j: (self.verified[j], j))
            raise BudgetUnreachable(
                f"no plan meets the budget of {requested} bytes (estimated peak at most {budget} with the margin "
                f"of {self.margin:g}): the lowest estimated peak is {self.verified[best]} "
                f"bytes (unplanned {self.baseline}), {self._strategy(best)}; "
                f"allow_offload={self.allow_offload}", self.verified[best], self._strategy(best))
        policy = self.policy_for(k)
        policy["budget_bytes"] = requested
        policy["margin"] = self.margin
        policy["estimated_peak_bytes"] = self.verified[k]
        policy["steps_taken"] = k
        policy["steps_available"] = n
        policy["actions_taken"] = self.taken[k]
        policy["actions_available"] = self.taken[n]
        policy["verified"] = {str(j): v for j, v in sorted(self.verified.items())}
        policy["summary"] = _summary(self.actions[:self.taken[k]], [r.key for r in self.regions], policy)
        return StepPlan(policy)

    def _strategy(self, j):
        return _strategy(self.actions[:self.taken[j]])


def _search(peak, verified, simulated, n, budget, max_estimates):
    """The smallest k whose verified peak meets the budget, assuming the verified peak falls as k grows; None when even
    all n actions miss it. Each guess is the first k whose simulated peak (plan_simulate, from the unplanned step's
    record), corrected by the simulation's error at the nearest verified prefix, meets the budget; the bracket
    (lo over the budget, hi within it) shrinks with every verified estimate until hi = lo + 1. Peaks verified before
    (other budgets) are reused."""
    if n == 0:
        return None
    over = [j for j, v in verified.items() if v > budget]
    within = [j for j, v in verified.items() if v <= budget]
    lo = max(over, default=0)
    hi = min((j for j in within if j > lo), default=None)
    lo = max((j for j in over if hi is None or j < hi), default=0)
    tries, width, slow, bisect = 0, None, 0, False
    while hi is None or hi - lo > 1:
        top = n if hi is None else hi - 1
        predicted = None
        if tries >= max_estimates:
            if hi is not None:
                return hi
            k = n  # out of estimates without a plan: the whole ladder decides
        elif bisect and hi is not None:
            k = (lo + hi) // 2
        else:
            target = budget - _correction(verified, simulated, lo)
            k = _first_within(simulated, lo + 1, top, target)
            near = min(verified, key=lambda j: (abs(j - k), j))
            if near != lo:  # the simulation's error where the guess fell
                target = budget - _correction(verified, simulated, near)
                k = _first_within(simulated, lo + 1, top, target)
            predicted = simulated(k) <= target
        tries += 1
        within = peak(k) <= budget
        if within:
            hi = k
        else:
            lo = k
            if k == n:
                lo, hi = _dip(peak, verified, simulated, n, budget)
                if hi is None:
                    return None
        # a bisection follows a guess the simulation got wrong and a second guess in a row that did not halve the
        # bracket, so the search stays logarithmic however poor the simulation is
        now = None if hi is None else hi - lo
        slow = slow + 1 if width is not None and now is not None and 2 * now > width else 0
        bisect = not bisect and (predicted is not None and predicted != within or slow >= 2)
        width = now
    return hi


def _dip(peak, verified, simulated, n, budget):
    """The whole ladder misses the budget, yet its peak need not fall all the way (offload's copies back can raise
    it): the prefix with the lowest simulated peak is tried, and when it meets the budget the bracket below it is
    returned, (lo, hi); else (n, None)."""
    if n < 2:
        return n, None
    k = min(range(1, n), key=lambda j: (simulated(j), j))
    if peak(k) > budget:
        return n, None
    return max(j for j, v in verified.items() if j < k and v > budget), k


def _correction(verified, simulated, k):
    return verified[k] - simulated(k)


def _first_within(simulated, lo, hi, target):
    """The smallest k in [lo, hi] whose simulated peak is at most target (bisection: the simulated peak taken as
    falling along the ladder); hi when none is."""
    while lo < hi:
        mid = (lo + hi) // 2
        if simulated(mid) <= target:
            hi = mid
        else:
            lo = mid + 1
    return hi


def _strategy(actions):
    s = _summary(actions, [])
    return (f"{s['recomputed_op_calls']} op calls recomputed ({s['recomputed_bytes']} bytes) in "
            f"{s['checkpointed_regions']} regions, {s['offloaded_bytes']} bytes offloaded")


def _summary(actions, region_keys, policy=None):
    rec = [a for a in actions if a.kind == "recompute"]
    off = [a for a in actions if a.kind != "recompute"]
    modes = Counter(i["mode"] for r in (policy or {}).get("regions", ()) for i in r["invocations"])
    return {"recomputed_op_calls": len(rec), "recomputed_bytes": sum(a.nbytes for a in rec),
            "recompute_seconds": sum(a.seconds for a in rec), "checkpointed_regions": len({a.scope for a in rec}),
            "whole_checkpoints": modes["checkpoint"], "selective_checkpoints": modes["recompute"],
            "offloaded_bytes": sum(a.nbytes for a in off), "offload_seconds": sum(a.seconds for a in off),
            "regions": region_keys}
