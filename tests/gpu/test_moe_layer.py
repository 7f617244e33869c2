"""GPU tests of kosmos.moe.MoELayer (every path), at any world size (ranks may share a GPU).

Every rank routes its own tokens (uneven counts, a rank with none); the whole batch's output is
compared, rank by rank, with the float64 reference forward (kosmos.moe.reference.forward on the
same bf16 parameters and inputs): relative Frobenius error below 3e-2 (the expert intermediate and
outputs are rounded to bf16 once each) over the tokens the device routed as the reference did (a
token whose fp32 logits put two candidates within rounding of each other may pick the other; at
most 1 % may). Reruns must be bitwise equal.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from kosmos.dtypes import bfloat16  # noqa: E402
from kosmos.errors import KosmosError  # noqa: E402
from kosmos.moe import MoEConfig, MoEGradients, MoELayer, MoEParams, expert_tensors, reference  # noqa: E402
from kosmos.reference import NcclBaseline  # noqa: E402

from .conftest import rank_input  # noqa: E402

TINY = {
    "softmax": MoEConfig(experts=8, top_k=2, hidden=128, intermediate=128, name="tiny-softmax"),
    "deepseek-like": MoEConfig(experts=16, top_k=4, hidden=128, intermediate=192, score="sigmoid",
                               expert_bias=True, groups=4, topk_groups=2, scaling=2.5, shared=2,
                               name="tiny-deepseek"),  # two shared experts: one MLP of width 384
    "top1-shared": MoEConfig(experts=8, top_k=1, hidden=192, intermediate=128, score="sigmoid", normalize=False,
                             shared=1, shared_intermediate=64, name="tiny-llama4"),
    # token dropping: each rank sends each expert at most ceil(0.8 T k / E) pairs; with an aux loss,
    # whose counts are the chosen pairs, dropped ones included (not the routing's own kept counts)
    "capacity": MoEConfig(experts=8, top_k=2, hidden=128, intermediate=128, capacity_factor=0.8,
                          aux_loss_coef=0.01, name="tiny-capacity"),
}


def tokens_of(rank: int, size: int, base: int) -> int:
    return 0 if (size > 1 and rank == size - 1 and base < 200) else base + 37 * rank


def step_inputs(world, cfg, seed, base):
    """(params, x, dy) on this rank: tokens_of(rank, size, base) tokens; seeds seed (params, x), seed + 1 (dy)."""
    r, P = world.rank, world.size
    params = MoEParams.random(cfg, world, seed)
    x = cupy.asarray(rank_input(seed, r, (tokens_of(r, P, base), cfg.hidden), np.float32).astype(bfloat16))
    dy = cupy.asarray(rank_input(seed + 1, r, x.shape, np.float32).astype(bfloat16))
    return params, x, dy


GRADIENTS = ("dx", "d_router_w", "dw1", "dw2", "d_shared_w1", "d_shared_w2")


def gradient_buffers(cfg, params, x, wgrad):
    """An MoEGradients of new buffers for backward(out=): dx bf16, d_router_w fp32, the rest `wgrad`."""
    shapes = {"dx": (x.shape, bfloat16), "d_router_w": ((cfg.experts, cfg.hidden), np.float32),
              "dw1": (params.w1.shape, wgrad), "dw2": (params.w2.shape, wgrad)}
    if cfg.shared:
        shapes.update(d_shared_w1=(params.shared_w1.shape, wgrad), d_shared_w2=(params.shared_w2.shape, wgrad))
    return MoEGradients(**{f: cupy.empty(sh, dt) for f, (sh, dt) in shapes.items()})


def poison(grads):
    """NaN in every buffer of an MoEGradients, in both dtypes (0x7FC0 bf16 pairs read as an fp32 NaN)."""
    for f in GRADIENTS:
        if getattr(grads, f) is not None:
            getattr(grads, f).view(np.uint16).fill(0x7FC0)


def on_every_rank(world, call):
    """call()'s result, once every rank has made it: an exception on any rank fails every rank's
    test (naming it) instead of leaving the others in the test's next collective."""
    try:
        result, error = call(), None
    except Exception as e:  # noqa: BLE001 -- reported on every rank below
        result, error = None, f"{type(e).__name__}: {e}"
    errors = world.comm.allgather(error)
    assert not any(errors), f"raised, by rank: {errors}"
    return result


def bits(grads):
    return {f: None if getattr(grads, f) is None else cupy.asnumpy(getattr(grads, f)).tobytes() for f in GRADIENTS}


def host(a):
    return cupy.asnumpy(a).astype(np.float64) if a is not None else None


def run_and_check(world, cfg, base_tokens, seed, params_hook=None, path="serial", counts=None, late=False):
    """counts: the tokens of each rank (default tokens_of); late: the last rank sleeps before its
    first forward (the others wait for its counts on the device)."""
    P, r = world.size, world.rank
    if cfg.experts % P:
        pytest.skip(f"{cfg.experts} experts do not divide over {P} ranks")
    if path == "baseline" and not NcclBaseline.available(world):
        pytest.skip(f"the NCCL baseline cannot run here: {NcclBaseline.unavailable_reason(world)}")
    counts = counts or [tokens_of(s, P, base_tokens) for s in range(P)]
    layer = MoELayer(world, cfg, max_tokens=max(max(counts), 1), path=path)
    try:
        params = MoEParams.random(cfg, world, seed)
        if params_hook:
            params_hook(params)
        xs = [rank_input(seed, s, (counts[s], cfg.hidden), np.float32).astype(bfloat16) for s in range(P)]
        x = cupy.asarray(xs[r])
        if late and r == P - 1:
            import time

            cupy.cuda.Device().synchronize()
            time.sleep(0.5)
        y1, ctx = layer.forward(x, params, check=True)
        y2, _ = layer.forward(x, params, check=True)
        assert cupy.asnumpy(y1).view(np.uint16).tobytes() == cupy.asnumpy(y2).view(np.uint16).tobytes()
        # the reference on the whole batch, every expert rebuilt from the seed
        w1 = np.stack([host(expert_tensors(cfg, g, seed)[0]) for g in range(cfg.experts)])
        w2 = np.stack([host(expert_tensors(cfg, g, seed)[1]) for g in range(cfg.experts)])
        x_all = np.concatenate([xx.astype(np.float64) for xx in xs])
        ref, routing = reference.forward(x_all, host(params.router_w), w1, w2, cfg, host(params.bias),
                                         host(params.shared_w1), host(params.shared_w2),
                                         rank_tokens=[len(xx) for xx in xs])
        lo = sum(len(xx) for xx in xs[:r])
        t = len(xs[r])
        got = cupy.asnumpy(y1).astype(np.float64)
        assert got.shape == (t, cfg.hidden) and np.isfinite(got).all()
        same = (cupy.asnumpy(ctx.routing.experts) == routing.experts[lo:lo + t]).all(axis=1)
        if cfg.capacity_factor:  # the same pairs dropped, and counted
            kept = np.ones((t, cfg.top_k), bool) if ctx.routing.kept is None else cupy.asnumpy(ctx.routing.kept)
            same &= (kept == routing.kept[lo:lo + t]).all(axis=1)
            if same.all():
                assert int(ctx.routing.dropped) == int((~kept).sum())
        else:
            assert ctx.routing.kept is None
        # fp32 near-ties may route up to 1 % of the tokens otherwise (none of fewer than 100)
        assert (~same).sum() <= t // 100, f"{(~same).sum()} of {t} tokens routed differently"
        if same.any():
            want = ref[lo:lo + t][same]
            err = np.linalg.norm(got[same] - want) / max(np.linalg.norm(want), 1e-30)
            assert err < 3e-2, err
        return ctx
    finally:
        layer.close()


PATHS = ["serial", "device", "fused", "baseline"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", sorted(TINY))
def test_forward_matches_the_reference(world, name, path):
    # softmax: 150 tokens a rank, and none on the last rank (at world > 1)
    run_and_check(world, TINY[name], 150 if name == "softmax" else 300, seed=21, path=path)


@pytest.mark.parametrize("capacity_factor", [0.0, 1.0])
@pytest.mark.parametrize("path", PATHS)
def test_one_expert_takes_every_token(world, path, capacity_factor):
    """A bias that makes expert 0 everybody's first choice: rank 0 receives every token (a hot rank);
    with a capacity factor of 1 each rank drops three quarters of those pairs."""
    cfg = dataclasses.replace(TINY["deepseek-like"], capacity_factor=capacity_factor)

    def hot(params):
        params.bias[0] = 10.0

    ctx = run_and_check(world, cfg, 257, seed=5, params_hook=hot, path=path)
    experts = cupy.asnumpy(ctx.routing.experts)
    assert (experts[:, 0] == 0).all()
    t = experts.shape[0]
    if capacity_factor and t:  # expert 0 keeps cap of its t first choices (its other pairs: none)
        kept = cupy.asnumpy(ctx.routing.kept)
        assert kept[:, 0].sum() == cfg.capacity_of(t) and int(ctx.routing.dropped) >= t - cfg.capacity_of(t)


@pytest.mark.parametrize("path", PATHS)
def test_tiny_token_counts_top_k_of_every_local_expert_and_a_late_rank(world, path):
    """1, 7, 129 and 0 tokens on the ranks (cycled), top_k = E/P (every pair of a token may go to one
    owner), the last rank arriving late: the forward against the float64 layer."""
    P = world.size
    cfg = MoEConfig(experts=8, top_k=max(1, 8 // P), hidden=128, intermediate=128, name="tiny-topk-eloc")
    run_and_check(world, cfg, 0, seed=9, path=path, counts=[(1, 7, 129, 0)[s % 4] for s in range(P)], late=True)


def test_bad_inputs_raise_on_every_rank(world):
    cfg = TINY["softmax"]
    if cfg.experts % world.size:
        pytest.skip(f"{cfg.experts} experts do not divide over {world.size} ranks")
    layer = MoELayer(world, cfg, max_tokens=64)
    try:
        params = MoEParams.random(cfg, world, 1)
        too_many = cupy.zeros((65, cfg.hidden), np.uint16).view(bfloat16)
        with pytest.raises(Exception, match="x must be"):
            layer.forward(too_many, params)
        # only the last rank's input is bad: it raises its own error, every other rank a KosmosError
        fine = cupy.zeros((8, cfg.hidden), np.uint16).view(bfloat16)
        last = world.rank == world.size - 1
        with pytest.raises(ValueError if last else KosmosError, match="x must be" if last else "rank"):
            layer.forward(too_many if last else fine, params)
        wrong = dataclasses.replace(params, w1=params.w2)
        with pytest.raises(Exception, match="w1"):
            layer.forward(cupy.zeros((8, cfg.hidden), np.uint16).view(bfloat16), wrong)
    finally:
        layer.close()


@pytest.mark.parametrize("path", PATHS)
def test_a_routing_past_capacity_raises_on_every_rank(world, path):
    cfg = TINY["softmax"]
    if cfg.experts % world.size or world.size > 8:
        pytest.skip("8 experts over this world")
    if path == "baseline" and not NcclBaseline.available(world):
        pytest.skip(f"the NCCL baseline cannot run here: {NcclBaseline.unavailable_reason(world)}")
    layer = MoELayer(world, cfg, max_tokens=64, capacity_rows=16, path=path)
    try:
        params = MoEParams.random(cfg, world, 2)
        x = cupy.asarray(rank_input(8, world.rank, (64, cfg.hidden), np.float32).astype(bfloat16))
        with pytest.raises(ValueError, match="capacity_rows = 16"):
            layer.forward(x, params, check=True)
        y, _ = layer.forward(cupy.asarray(rank_input(9, world.rank, (1, cfg.hidden), np.float32).astype(bfloat16)),
                             params, check=True)  # the next call works (1 token x k from each rank fits)
        assert np.isfinite(cupy.asnumpy(y).astype(np.float32)).all()
    finally:
        layer.close()


@pytest.mark.parametrize("path", ["device", "fused"])
def test_a_failed_forward_gives_nan_everywhere(world, path):
    """A routing past capacity_rows without check=True: the output and every gradient NaN (decided on
    the device, no host sync), and the forwards and backwards after it are finite again."""
    cfg = TINY["softmax"]
    if cfg.experts % world.size:
        pytest.skip("8 experts over this world")
    layer = MoELayer(world, cfg, max_tokens=64, capacity_rows=16, path=path)
    try:
        params = MoEParams.random(cfg, world, 4)
        # 64 tokens x k = 2 overflow 16 rows; 1 token fits. Good calls before the bad one too: a
        # failed call must still reset the next call's queues (a stale head would move nothing)
        for t, bad in ((1, False), (1, False), (64, True), (1, False), (1, False)):
            x = cupy.asarray(rank_input(10 + t, world.rank, (t, cfg.hidden), np.float32).astype(bfloat16))
            dy = cupy.asarray(rank_input(11 + t, world.rank, (t, cfg.hidden), np.float32).astype(bfloat16))
            y, ctx = layer.forward(x, params)
            g = layer.backward(dy, ctx, params)
            for name, a in (("y", y), ("dx", g.dx), ("dw1", g.dw1), ("dw2", g.dw2)):
                v = cupy.asnumpy(a).astype(np.float32)
                assert (np.isnan(v).all() if bad else np.isfinite(v).all()), (name, bad)
    finally:
        layer.close()


BIG = MoEConfig(experts=8, top_k=2, hidden=512, intermediate=256, name="big")  # several tiles per CTA


# The router's losses on (their gradients run in the fused backward's first phase)
LOSSES = MoEConfig(experts=8, top_k=2, hidden=128, intermediate=128, aux_loss_coef=0.01, z_loss_coef=0.001,
                   name="tiny-losses")


@pytest.mark.parametrize("name", ["deepseek-like", "top1-shared", "big", "losses", "capacity", "empty-rank"])
def test_fused_is_bitwise_the_device_path(world, name):
    """path="fused" (the experts' part in one launch each way: MoEForward, MoEBackward, the router's
    backward inside the latter) against path="device" (separate launches) on the same inputs: the
    output and every gradient bitwise equal (the same builder computes the same tiles; only the
    launches around them differ). "big": 4,096+ tokens a rank, so every CTA builds several tiles
    and movers wait for tile rows; "losses": aux and z losses; "capacity": token dropping;
    "empty-rank": the last rank has no tokens (world > 1)."""
    cfg = {"big": BIG, "losses": LOSSES, "empty-rank": TINY["deepseek-like"]}.get(name) or TINY[name]
    P = world.size
    if cfg.experts % P:
        pytest.skip(f"{cfg.experts} experts do not divide over {P} ranks")
    base = {"big": 4096, "empty-rank": 120}.get(name, 400)
    outs = []
    for path in ("device", "fused"):
        layer = MoELayer(world, cfg, max_tokens=base + 37 * P, path=path)
        try:
            params, x, dy = step_inputs(world, cfg, 13, base)
            y, ctx = layer.forward(x, params, check=True)
            g = layer.backward(dy, ctx, params)
            losses = ctx.routing.losses
            outs.append({"y": cupy.asnumpy(y).tobytes(), **bits(g),
                         "losses": None if losses is None else cupy.asnumpy(losses).tobytes()})
        finally:
            layer.close()
    for name_ in outs[0]:
        assert outs[0][name_] == outs[1][name_], f"{name_} differs between the fused and the device paths"


@pytest.mark.parametrize("path", ["fused", "device", "serial"])
@pytest.mark.parametrize("wgrad,experts", [(np.float32, 16), (bfloat16, 16), (np.float32, 64)])
def test_backward_into_the_callers_buffers(world, path, wgrad, experts):
    """backward(out=...) writes the caller's NaN-poisoned buffers and returns them: bitwise the
    gradients of a call without out (the same forward run again), on every step of a loop over the
    same buffers (path fused: its memo's hits). 16 experts: dWr through the padded rows; 64: dWr
    the launch's own output, and (world > 1) the last rank without tokens. A wrong buffer on rank 0
    is refused there (ValueError) and everywhere else (KosmosError)."""
    cfg = dataclasses.replace(TINY["deepseek-like"], experts=experts)
    P, r = world.size, world.rank
    if cfg.experts % P:
        pytest.skip(f"{cfg.experts} experts do not divide over {P} ranks")
    base = 400 if experts == 16 else 120  # under 200: tokens_of gives the last rank none
    layer = MoELayer(world, cfg, max_tokens=base + 37 * P, path=path)
    try:
        params, x, dy = step_inputs(world, cfg, 21, base)
        _, ctx = layer.forward(x, params, check=True)
        want = bits(layer.backward(dy, ctx, params, wgrad_dtype=wgrad))
        out = gradient_buffers(cfg, params, x, wgrad)
        for step in range(3):
            poison(out)
            _, ctx = layer.forward(x, params, check=True)
            got = on_every_rank(world, lambda: layer.backward(dy, ctx, params, wgrad_dtype=wgrad, out=out))
            assert got is out, "backward(out=) returns the buffers it was given"
            bad = [f for f, b in bits(out).items() if b != want[f]]
            everyone = world.comm.allgather(bad)
            assert not any(everyone), f"step {step}: not bitwise the call without out: {everyone}"
        _, ctx = layer.forward(x, params, check=True)
        wrong = dataclasses.replace(out, dw1=out.dw2) if r == 0 else out
        err = None
        try:
            layer.backward(dy, ctx, params, wgrad_dtype=wgrad, out=wrong)
        except (ValueError, KosmosError) as e:
            err = e
        kinds = world.comm.allgather(type(err).__name__ if err is not None else None)
        assert kinds[0] == "ValueError" and all(k == "KosmosError" for k in kinds[1:]), kinds
        assert "out.dw1" in str(err) or r != 0, err
    finally:
        layer.close()


@pytest.mark.parametrize("name", ["deepseek-like", "capacity"])
def test_a_training_loop_hits_the_fused_backwards_memo(world, name, monkeypatch):
    """Path fused, a loop of steps over the same inputs and gradient buffers: from the second step
    on, the backward takes its kernel arguments from its memo (MoEBackward._checked_heads patched
    to fail) and skips the checks of `out` (MoELayer._checked_gradients, likewise), with the same bits; then, new tokens and router weights written into the same arrays
    (a hit still), the bits of a fresh layer on them. "deepseek-like": 16 experts, so the router
    weight goes through the layer's padded copy; "capacity": token dropping with an aux loss, whose
    pair counts the layer computes apart. Either, built anew per call, would make every step miss;
    either, filled only when allocated, would be stale after the weights change."""
    from kosmos.moe.backward import MoEBackward

    cfg, P = TINY[name], world.size
    if cfg.experts % P:
        pytest.skip(f"{cfg.experts} experts do not divide over {P} ranks")
    layer = MoELayer(world, cfg, max_tokens=400 + 37 * P, path="fused")
    try:
        params, x, dy = step_inputs(world, cfg, 31, 400)
        out = gradient_buffers(cfg, params, x, np.float32)
        _, ctx = layer.forward(x, params, check=True)
        want = bits(layer.backward(dy, ctx, params, out=out))

        def missed(*args, **kwargs):  # a refusal: the rank still launches (moving nothing), no peer waits
            raise ValueError("the fused backward's memo missed a step it has seen")

        monkeypatch.setattr(MoEBackward, "_checked_heads", missed)
        monkeypatch.setattr(MoELayer, "_checked_gradients", missed)
        for step in range(2):
            poison(out)
            _, ctx = layer.forward(x, params, check=True)
            got = bits(on_every_rank(world, lambda: layer.backward(dy, ctx, params, out=out)))
            bad = world.comm.allgather([f for f in GRADIENTS if got[f] != want[f]])
            assert not any(bad), f"step {step + 2}: not bitwise the first step: {bad}"
        new_params, new_x, _ = step_inputs(world, cfg, 41, 400)
        x.view(np.uint16)[...] = new_x.view(np.uint16)
        params.router_w.view(np.uint16)[...] = new_params.router_w.view(np.uint16)
        poison(out)
        _, ctx = layer.forward(x, params, check=True)
        got = bits(on_every_rank(world, lambda: layer.backward(dy, ctx, params, out=out)))
    finally:
        layer.close()
    monkeypatch.undo()
    fresh = MoELayer(world, cfg, max_tokens=400 + 37 * P, path="fused")
    try:
        _, ctx = fresh.forward(x, params, check=True)
        want = bits(fresh.backward(dy, ctx, params))
    finally:
        fresh.close()
    bad = world.comm.allgather([f for f in GRADIENTS if got[f] != want[f]])
    assert not any(bad), f"new values in the same arrays: not bitwise a fresh layer's: {bad}"


def backward_case(world, cfg, seed, zero_dy=False, path="device"):
    """(the layer's gradients, per-rank float64 reference gradients or None for an empty rank)."""
    P, r = world.size, world.rank
    base = 120  # under 200: the last rank has no tokens (at world > 1)
    layer = MoELayer(world, cfg, max_tokens=base + 37 * P, path=path)
    try:
        params = MoEParams.random(cfg, world, seed)
        xs = [rank_input(seed, s, (tokens_of(s, P, base), cfg.hidden), np.float32).astype(bfloat16)
              for s in range(P)]
        dys = [(np.zeros(xx.shape, np.float32) if zero_dy else rank_input(seed + 1, s, xx.shape, np.float32))
               .astype(bfloat16) for s, xx in enumerate(xs)]
        y, ctx = layer.forward(cupy.asarray(xs[r]), params, check=True)
        g = layer.backward(cupy.asarray(dys[r]), ctx, params)
        if path in ("device", "fused"):
            with pytest.raises(ValueError, match="last forward, once"):
                layer.backward(cupy.asarray(dys[r]), ctx, params)  # a second backward of one forward
        host_g = {f: None if getattr(g, f) is None else cupy.asnumpy(getattr(g, f)).astype(np.float64)
                  for f in ("dx", "d_router_w", "dw1", "dw2", "d_shared_w1", "d_shared_w2")}
        experts = world.comm.allgather(cupy.asnumpy(ctx.routing.experts))  # the device's choices
        kepts = world.comm.allgather(None if ctx.routing.kept is None else cupy.asnumpy(ctx.routing.kept))
        w1 = np.stack([host(expert_tensors(cfg, e, seed)[0]) for e in range(cfg.experts)])
        w2 = np.stack([host(expert_tensors(cfg, e, seed)[1]) for e in range(cfg.experts)])
        refs = [reference.backward(xx.astype(np.float64), host(params.router_w), w1, w2, cfg,
                                   d.astype(np.float64), host(params.bias), host(params.shared_w1),
                                   host(params.shared_w2), experts=ex, kept=kp) if len(xx) else None
                for xx, d, ex, kp in zip(xs, dys, experts, kepts)]
        return host_g, refs
    finally:
        layer.close()


def rel(got, ref):
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)


@pytest.mark.parametrize("path", ["device", "serial", "baseline"])
@pytest.mark.parametrize("name", ["softmax", "deepseek-like", "top1-shared", "capacity"])
def test_backward_matches_the_reference(world, name, path):
    """MoELayer.backward against kosmos.moe.reference.backward on the device's routing, per rank
    (each rank's router losses are over its own tokens, so the distributed loss is the sum of the
    ranks'): this rank's dx; its experts' dW1/dW2, the router's and the shared experts' dW (summed
    over ranks) against the ranks' summed references; relative Frobenius error < 5e-2 each (bf16
    operands, fp32 accumulation). The last rank has no tokens at world > 1. The fused path is
    bitwise the device path (test_fused_is_bitwise_the_device_path); the serial and baseline paths
    move the rows as their forward did."""
    from mpi4py import MPI

    cfg = dataclasses.replace(TINY[name], aux_loss_coef=0.01, z_loss_coef=0.001)
    P, r = world.size, world.rank
    if cfg.experts % P:
        pytest.skip(f"{cfg.experts} experts do not divide over {P} ranks")
    if path == "baseline" and not NcclBaseline.available(world):
        pytest.skip(f"the NCCL baseline cannot run here: {NcclBaseline.unavailable_reason(world)}")
    g, refs = backward_case(world, cfg, seed=31, path=path)
    e_loc = cfg.experts // P
    summed = lambda f: sum(getattr(x, f) for x in refs if x is not None)  # noqa: E731
    total = lambda a: world.comm.allreduce(a, op=MPI.SUM)  # noqa: E731
    if refs[r] is not None:
        assert rel(g["dx"], refs[r].dx) < 5e-2
    assert rel(g["dw1"], summed("dw1")[r * e_loc:(r + 1) * e_loc]) < 5e-2
    assert rel(g["dw2"], summed("dw2")[r * e_loc:(r + 1) * e_loc]) < 5e-2
    assert rel(total(g["d_router_w"]), summed("d_router_w")) < 5e-2
    if cfg.shared:
        assert rel(total(g["d_shared_w1"]), summed("d_shared_w1")) < 5e-2
        assert rel(total(g["d_shared_w2"]), summed("d_shared_w2")) < 5e-2


@pytest.mark.parametrize("path", ["device", "serial", "baseline"])
@pytest.mark.parametrize("name", ["deepseek-like", "top1-shared"])
def test_bf16_wgrads_are_the_fp32_ones_rounded_once(world, name, path):
    """wgrad_dtype=bfloat16: every expert weight gradient (routed and shared) is the fp32 one rounded
    to bf16 once, bitwise (the same accumulators; the baseline's products are bf16 anyway); dx and
    the router's dW (fp32) are unchanged, bitwise. Two forwards of the same input (bitwise reruns),
    one backward each; a bad dtype is refused on every rank."""
    from kosmos.dtypes import f32_to_bf16

    cfg = TINY[name]
    P = world.size
    if cfg.experts % P:
        pytest.skip(f"{cfg.experts} experts do not divide over {P} ranks")
    if path == "baseline" and not NcclBaseline.available(world):
        pytest.skip(f"the NCCL baseline cannot run here: {NcclBaseline.unavailable_reason(world)}")
    layer = MoELayer(world, cfg, max_tokens=400, path=path)
    try:
        params = MoEParams.random(cfg, world, 5)
        t = tokens_of(world.rank, P, 120)
        x = cupy.asarray(rank_input(21, world.rank, (t, cfg.hidden), np.float32).astype(bfloat16))
        dy = cupy.asarray(rank_input(22, world.rank, (t, cfg.hidden), np.float32).astype(bfloat16))
        grads = {}
        for dt in (np.float32, bfloat16):
            _, ctx = layer.forward(x, params)
            grads[dt] = layer.backward(dy, ctx, params, wgrad_dtype=dt)
        f32, b16 = grads[np.float32], grads[bfloat16]
        for f in ("dw1", "dw2", "d_shared_w1", "d_shared_w2"):
            if getattr(f32, f) is None:
                continue
            want = cupy.asnumpy(f32_to_bf16(getattr(f32, f))).view(np.uint16)
            got = getattr(b16, f)
            assert got.dtype == bfloat16, f
            assert (cupy.asnumpy(got).view(np.uint16) == want).all(), f"{f}: not the fp32 gradient rounded once"
        for f in ("dx", "d_router_w"):
            assert (cupy.asnumpy(getattr(f32, f)).view(np.uint8) == cupy.asnumpy(getattr(b16, f)).view(np.uint8)).all(), f
        _, ctx = layer.forward(x, params)
        bad = world.rank == 0
        with pytest.raises(TypeError if bad else KosmosError, match="wgrad_dtype"):
            layer.backward(dy, ctx, params, wgrad_dtype=np.float16 if bad else np.float32)
    finally:
        layer.close()


@pytest.mark.parametrize("name", ["softmax", "deepseek-like"])
def test_router_loss_gradients_alone(world, name):
    """dy = 0: only the aux loss and the z-loss drive the router's dW and dx (fp32 math: 1e-2)."""
    from mpi4py import MPI

    cfg = dataclasses.replace(TINY[name], aux_loss_coef=1.0, z_loss_coef=0.5)
    if cfg.experts % world.size:
        pytest.skip(f"{cfg.experts} experts do not divide over {world.size} ranks")
    g, refs = backward_case(world, cfg, seed=13, zero_dy=True)
    want = sum(x.d_router_w for x in refs if x is not None)
    assert rel(world.comm.allreduce(g["d_router_w"], op=MPI.SUM), want) < 1e-2
    if refs[world.rank] is not None:
        assert rel(g["dx"], refs[world.rank].dx) < 1e-2
    assert np.abs(g["dw1"]).max() == 0 and np.abs(g["dw2"]).max() == 0  # dY = 0 rows: exactly zero


@pytest.mark.parametrize("rule", [
    dict(score="softmax", normalize=True, aux_loss_coef=0.01, z_loss_coef=0.001),
    dict(score="softmax", normalize=False, scaling=1.0),
    dict(score="sigmoid", normalize=True, scaling=2.5, aux_loss_coef=0.001),
    dict(score="sigmoid", normalize=False, scaling=1.0, z_loss_coef=0.01),
])
@pytest.mark.parametrize("experts,top_k", [(16, 2), (96, 6), (256, 8)])
def test_router_backward_kernel_is_the_reference_rule(world, rule, experts, top_k):
    """kosmos.moe.layer.router_backward (one kernel) against reference.router_logit_grads in
    float64 (the rule checked by finite differences), padded logits, every term on and off;
    bitwise-equal reruns."""
    import cupy

    from kosmos.moe.layer import _backward_kernels, router_backward

    cfg = MoEConfig(name="t", experts=experts, top_k=top_k, hidden=64, intermediate=64, **rule)
    rng = np.random.default_rng([experts, top_k, len(rule)])
    t, pad = 333, -(-experts // 64) * 64
    logits = (rng.standard_normal((t, pad)) * 2).astype(np.float32)
    chosen = np.argsort(rng.standard_normal((t, experts)), axis=1)[:, :top_k].astype(np.int32)
    d_w = rng.standard_normal((t, top_k)).astype(np.float32)
    want = reference.router_logit_grads(np, logits[:, :experts].astype(np.float64), chosen.astype(np.int64),
                                        d_w.astype(np.float64), cfg)
    kernels = _backward_kernels(world)
    got = router_backward(cupy.asarray(logits), cupy.asarray(chosen), cupy.asarray(d_w), cfg, kernels)
    again = router_backward(cupy.asarray(logits), cupy.asarray(chosen), cupy.asarray(d_w), cfg, kernels)
    got = cupy.asnumpy(got)
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 1e-5, rel  # fp32 sums over at most 256 experts
    np.testing.assert_array_equal(got.view(np.uint32), cupy.asnumpy(again).view(np.uint32))


@pytest.mark.parametrize("capacity_factor", [0.0, 1.0])
@pytest.mark.parametrize("path", ["device", "fused"])
def test_a_captured_step_replays_with_new_tokens(world, path, capacity_factor):
    """forward + backward captured in one CUDA graph (kosmos.graphs.capture) and replayed with new
    token values and gradients in the captured inputs, so a new routing on every replay (the third
    with a bias that sends every token's first choice to expert 0: rank 0 is hot): every replay's
    output, losses and gradients, poisoned before it, are bitwise an eager step's on the same inputs.
    Uneven token counts; shared expert, groups, sigmoid scores, aux and z losses; with token
    dropping too (the keep rule inside the graph); hidden 1,024, so the router GEMM is split along K
    (4 ranges at ~300 tokens: router_splits) in both paths, inside the graph."""
    from kosmos.dtypes import copy_into
    from kosmos.graphs import capture

    if cupy.cuda.runtime.is_hip:
        pytest.skip("CuPy's stream capture is CUDA-only")
    cfg = dataclasses.replace(TINY["deepseek-like"], aux_loss_coef=0.01, z_loss_coef=0.001,
                              capacity_factor=capacity_factor, hidden=1024)
    P, r = world.size, world.rank
    if cfg.experts % P:
        pytest.skip(f"{cfg.experts} experts do not divide over {P} ranks")
    t = tokens_of(r, P, 300)
    layer = MoELayer(world, cfg, max_tokens=300 + 37 * P, path=path)
    try:
        params = MoEParams.random(cfg, world, 41)
        fresh = lambda seed: cupy.asarray(rank_input(seed, r, (t, cfg.hidden), np.float32).astype(bfloat16))  # noqa: E731
        x, dy = fresh(41), fresh(42)

        def results(y, ctx, g):
            kept = [] if ctx.routing.kept is None else [ctx.routing.kept]
            return [y, ctx.routing.losses, ctx.routing.experts, g.dx, g.d_router_w, g.dw1, g.dw2, g.d_shared_w1,
                    g.d_shared_w2, *kept]

        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            y0, ctx0 = layer.forward(x, params)  # the eager step first: plans, kernels, the device order
            layer.backward(dy, ctx0, params)
            with capture(stream, world) as step:
                y, ctx = layer.forward(x, params)
                g = layer.backward(dy, ctx, params)
            captured = results(y, ctx, g)
            routings = []
            for replay in range(3):
                copy_into(x, fresh(50 + replay), stream)
                copy_into(dy, fresh(60 + replay), stream)
                if replay == 2:
                    params.bias[0] = 10.0
                for a in captured:
                    a.view(np.uint8).fill(0xFF)
                step.launch()
                got = [cupy.asnumpy(a) for a in captured]
                ye, ce = layer.forward(x, params)
                want = [cupy.asnumpy(a) for a in results(ye, ce, layer.backward(dy, ce, params))]
                stream.synchronize()
                world.status.raise_if_failed()
                names = ("y", "losses", "experts", "dx", "d_router_w", "dw1", "dw2", "d_shared_w1", "d_shared_w2",
                         "kept")
                assert len(got) == len(want)
                for name, a, b in zip(names, got, want):
                    assert a.tobytes() == b.tobytes(), f"replay {replay}: {name} differs from the eager step's"
                assert np.isfinite(got[0].astype(np.float32)).all() and np.isfinite(got[3].astype(np.float32)).all()
                routings.append(got[2])
        if t:
            assert not (routings[0] == routings[1]).all(), "new tokens, the same routing: did the replay read them?"
            assert (routings[2][:, 0] == 0).all()
    finally:
        layer.close()


@pytest.mark.parametrize("name", ["deepseek-like", "softmax"])
def test_memory_counts_the_fused_launches_buffers(world, name):
    """MoELayer.memory()["launch_buffers"] (path fused): after a forward and a backward of every wgrad
    dtype at max_tokens, the bytes the launches hold are what it says (and before, what one
    backward will hold)."""
    cfg = TINY[name]
    if cfg.experts % world.size:
        pytest.skip(f"{cfg.experts} experts do not divide over {world.size} ranks")
    t = 96
    layer = MoELayer(world, cfg, max_tokens=t, path="fused")
    try:
        params = MoEParams.random(cfg, world, 5)
        x = cupy.asarray(rank_input(5, world.rank, (t, cfg.hidden), np.float32).astype(bfloat16))
        dy = cupy.asarray(rank_input(6, world.rank, (t, cfg.hidden), np.float32).astype(bfloat16))
        said = layer.memory()["launch_buffers"]
        for wdt in (np.float32, bfloat16):
            _, ctx = layer.forward(x, params, check=True)
            layer.backward(dy, ctx, params, wgrad_dtype=wdt)
            fwd = layer._forward
            held = fwd._h.nbytes + fwd._y_e.nbytes
            for b in layer._backwards.values():
                held += b._held.nbytes + b._ones.nbytes
            if wdt == np.float32:
                assert held == said, (held, said)
        assert held == layer.memory()["launch_buffers"], (held, layer.memory())
    finally:
        layer.close()
