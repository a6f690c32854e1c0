"""What a CUDA graph forbids, checked on the CPU: the functions GRPO captures on a GPU (the
prefill, the decode step, the reference's scoring, the update's forward and backward) must
never read a device value on the host — ``.item()``, ``bool(tensor)``, ``nonzero`` and
other ops whose result size or value the host needs — or the capture fails (and that path
runs eagerly, slower). Every op they dispatch is watched while torch reports a capture in
progress, as it does on a GPU, so that the libraries' capture-aware branches (transformers'
mask code skips its checks then) take the path they take there. The capture itself needs a
GPU: tests/gpu/test_grpo_graphs.py."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("transformers")

from workbench.algorithms import grpo  # noqa: E402
from workbench.llm import generation  # noqa: E402
from workbench.llm.models import tiny_causal_lm  # noqa: E402
from workbench.llm.tasks import encode_prompts  # noqa: E402

#: ops that make the host wait for the device's answer (their result's value or size)
HOST_READS = (
    "aten._local_scalar_dense",
    "aten.is_nonzero",
    "aten.nonzero",
    "aten.equal",
    "aten.masked_select",
    "aten._unique",
    "aten.unique",
    "aten.repeat_interleave.Tensor",
    "aten.allclose",
)


class HostReads(TorchDispatchMode):
    """Records every op of :data:`HOST_READS` dispatched inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func).startswith(HOST_READS):
            self.found.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def capturing(monkeypatch):
    """torch says a capture is running (what transformers' is_tracing asks on a GPU)."""
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)


def _watched(fn, *inputs):
    with HostReads() as watch:
        out = fn(*inputs)
    return out, watch.found


def test_the_watch_sees_a_host_read():
    x = torch.ones(3)
    assert _watched(lambda: float(x.sum()))[1] == ["aten._local_scalar_dense.default"]
    assert _watched(lambda: bool((x > 0).all()))[1]


@pytest.fixture(params=[False, True], ids=["cpu-forms", "gpu-forms"])
def fused(request, monkeypatch):
    """llama_fast's forms on the CPU (written out) and on a GPU (fused kernels), both watched."""
    from workbench.llm import llama_fast

    monkeypatch.setattr(llama_fast, "FUSED", request.param)


@pytest.mark.parametrize(
    "kind,attention",
    [("llama", "eager"), ("llama", "sdpa"), ("llama-gqa", "eager"), ("qwen2", "eager"), ("qwen2", "sdpa")],
)
def test_sampling_forwards_read_nothing_on_the_host(capturing, monkeypatch, fused, kind, attention):
    """A plain Llama samples through llama_fast's static keys and values (each distinct
    prompt prefilled once; grouped-query heads too), another model through transformers'
    StaticCache: either way the prefill and the decode step read nothing on the host."""
    from tests.llm.test_static_sampling import _from_config

    if kind in ("qwen2", "llama-gqa"):  # the latter: 4 query heads over 2 key/value heads
        model = _from_config("qwen2" if kind == "qwen2" else "llama-sdpa")
    else:
        model = tiny_causal_lm(grpo.tokenizer, hidden=32, layers=2, context=16, seed=0)
    model.config._attn_implementation = attention
    found: dict[str, list[str]] = {}

    def check_each(owner, name, fn, inputs, warmup=0):  # in place of the capture
        out, reads = _watched(fn, *inputs)
        found.setdefault(name.split("[")[0], []).extend(reads)
        return out

    monkeypatch.setattr(generation, "graphed_call", check_each)
    ids, mask = encode_prompts(grpo.tokenizer, ["1+2=", "13+14=", "0+0=", "1+2="], 7)  # a repeat: shared prefill
    generation.sample_static(
        model,
        ids,
        mask,
        max_new_tokens=4,
        eos_id=grpo.tokenizer.eos_token_id,
        pad_id=grpo.tokenizer.pad_token_id,
        seed=0,
        graphs=True,
    )
    assert set(found) == {"prefill", "decode"} and found == {"prefill": [], "decode": []}


def test_the_reference_scoring_and_the_updates_backward_read_nothing_on_the_host(capturing):
    cfg = grpo.GRPOConfig()
    model = tiny_causal_lm(grpo.tokenizer, hidden=32, layers=2, context=16, seed=1)
    ids, mask = encode_prompts(grpo.tokenizer, ["1+2=", "13+14=", "0+0=", "7+7="], 7)
    tokens = torch.randint(0, 12, (4, 4))
    completion = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    with torch.no_grad():
        (ref,), reads = _watched(generation.scorer(model), ids, mask, tokens, completion)
    assert reads == []

    def forward_backward():
        (logp,) = generation.scorer(model)(ids, mask, tokens, completion)
        advantages = grpo.group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.0]), 2)
        loss, clip_fraction, kl = grpo._loss_terms(
            logp, logp.detach() - 0.1, ref, advantages, completion, clip_coef=cfg.clip_coef, kl_coef=cfg.kl_coef
        )
        loss.backward()
        grpo._clip_gradients([p for p in model.parameters() if p.requires_grad], cfg.max_grad_norm)
        return loss, clip_fraction, kl

    (loss, _, _), reads = _watched(forward_backward)
    assert reads == [] and all(p.grad is not None for p in model.parameters())


def test_the_shared_prompt_scoring_and_update_read_nothing_on_the_host(capturing, fused):
    """GRPO's groups on a GPU: the distinct prompts are found before the capture (that reads
    the batch); the captured scoring and forward + backward over them read nothing."""
    model = tiny_causal_lm(grpo.tokenizer, hidden=32, layers=2, context=16, seed=2)
    ids, mask = encode_prompts(grpo.tokenizer, [p for p in ["1+2=", "13+14=", "0+0="] for _ in range(4)], 7)
    shared = generation.graphable_prompts(model, ids, mask)
    assert shared is not None and shared[0].shape[0] == 4  # 3 distinct, padded
    tokens = torch.randint(0, 12, (12, 4))
    completion = (torch.rand(12, 4) > 0.3).float()
    with torch.no_grad():
        ref, reads = _watched(lambda: generation._shared_prompt_logp(model, 1.0, shared, ids, mask, tokens, completion))
    assert reads == []

    def forward_backward():
        logp = generation.sequence_logp(model, ids, mask, tokens, completion, shared=shared)
        logp.sum().backward()
        return logp

    _, reads = _watched(forward_backward)
    assert reads == [] and all(p.grad is not None for p in model.parameters())
