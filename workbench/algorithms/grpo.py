"""GRPO with verifiable rewards for a causal language model, written as workbench fragments.

Read it top to bottom: the hyperparameters, the task and tokenizer, the pieces of the update
(group-normalised advantages, the clipped token-level loss with a KL term), then the fragment
cells. ``notebooks/grpo.ipynb`` holds the same cells, byte for byte, and builds the same FDG.

The fragments: ``prompts`` draws training prompts (each repeated ``group_size`` times);
``generate`` samples one completion per copy with a KV cache; ``reward`` scores each
``(prompt, completion)`` with ``reward_fn``, a plain function of the notebook; ``reference``
gives each completion token's log-probability under the frozen starting model (the KL term);
``learner`` takes one GRPO step on everything the step cells produced and publishes
``weights``, which the generate replicas load at the iteration boundary. A run's *steps* are
generation batches: each iteration learns from ``steps × prompts_per_step × group_size``
completions.

Example:
    >>> from workbench.algorithms import grpo
    >>> fdg = grpo.build_fdg()
    >>> sorted(fdg.fragments)
    ['generate', 'learner', 'prompts', 'reference', 'reward']
    >>> run = fdg.run(iterations=10, steps=1, unit="completions", progress=False)   # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import workbench as wb
from workbench.algorithms.config_docs import documented
from workbench.algorithms.ppo import _one_learner, _sync_and_clip
from workbench.kernels.cuda_graphs import captured_graphs
from workbench.algorithms.optim import adam
from workbench.algorithms.ppo_graphs import graphed_update, update_captured
from workbench.llm.generation import graphable_prompts, model_device, sample, sequence_logp
from workbench.llm.errors import LLMInputError

# the fragment cells read these from this module's globals (build_fdg's default namespace)
from workbench.llm.models import (  # noqa: F401
    context_length,
    count_parameters,
    frozen,
    load_causal_lm,
    load_weights,
    weights_copy,
)
from workbench.llm.tasks import (  # noqa: F401
    AdditionTask,
    decode_completions,
    encode_prompts,
    exact_answer_reward,
    heldout_accuracy,
    score_completions,
)
from workbench.llm.tokenizers import char_tokenizer

__all__ = [
    "GRPOConfig",
    "check_config",
    "group_advantages",
    "grpo_loss",
    "grpo_update",
    "make_model",
    "adam",
    "prompt_batch",
    "generate_completions",
    "reference_logp",
    "FRAGMENT_CELLS",
    "build_fdg",
    "cfg",
    "task",
    "tokenizer",
    "reward_fn",
    "load_weights",
]


# ----------------------------------------------------------------------------- hyperparameters
@documented
@dataclass
class GRPOConfig:
    """Every GRPO hyperparameter, in one place. The defaults learn 2-operand addition on two
    CPU cores in about a minute after the notebook's supervised warm start."""

    seed: int = 1
    """seeds the model, the data split and the sampling (prompt replica ``i`` draws with ``seed + i``)"""
    max_operand: int = 49
    """prompts are ``a+b=`` with ``a, b`` in ``0 … max_operand`` (49: 2,000 training pairs and 500
    held out, whose accuracy moves ±0.01 between measurements; 19 holds out 80, ±0.05)"""
    heldout_fraction: float = 0.2
    """the pairs never trained on, for held-out accuracy"""
    model: Any = None
    """a transformers causal LM object, a local directory, or None for a small Llama built from the sizes below"""
    hidden: int = 64
    """width of the model built from a config"""
    layers: int = 2
    """its transformer blocks"""
    heads: int = 4
    """its attention heads"""
    context: int = 16
    """its positions: prompt width + max_new_tokens must fit"""
    prompts_per_step: int = 16
    """distinct prompts per step, split across the prompt replicas (keep it divisible by their count)"""
    group_size: int = 8
    """completions sampled per prompt (G); advantages are normalised within each group"""
    max_new_tokens: int = 4
    """the longest completion, ``<eos>`` included"""
    temperature: float = 1.0
    """sampling temperature (the learner scores tokens at the same one)"""
    top_p: float = 1.0
    """nucleus sampling: keep the most likely tokens whose mass reaches this"""
    learning_rate: float = 1e-4
    """Adam step size (read every iteration: ``%fdg update cfg`` changes it live)"""
    clip_coef: float = 0.2
    """the ratio's clipping, as PPO's"""
    kl_coef: float = 0.02
    """weight of the KL to the frozen reference (0 skips the reference's forward pass)"""
    max_grad_norm: float = 1.0
    """global gradient-norm clipping"""
    iterations: int = 40
    """iterations a run takes (the notebook's budget knob; CI runs fewer)"""
    eval_every: int = 5
    """iterations between held-out accuracy measurements (greedy, on the whole held-out set)"""
    max_staleness: int = 2
    """under async: the most updates a batch's sampling weights may lag the learner; a staler
    batch is dropped (``charts/dropped_stale_batches`` counts them). Replicas at one pace lag by at most
    generate replicas − 1: keep it at least that"""
    warm_start_steps: int = 800
    """the most supervised steps before RL in the notebook (0 skips it); it stops sooner at ``warm_until``"""
    warm_until: float | None = 0.6
    """the notebook's warm start stops once greedy accuracy on 256 training prompts reaches this
    (None: all ``warm_start_steps``). A fixed step count leaves seeds between 0.07 and 0.35, and
    GRPO barely moves a model that is rarely right"""
    cuda_graphs: bool = True
    """on a GPU, replay generation's forwards, the reference's scoring and the update as CUDA
    graphs (``workbench.llm.generation``; one learner only); no effect on the CPU"""
    dropout: bool = False
    """train with the model's dropout on. Off (TRL's ``disable_dropout``): with it on, each forward
    draws its own masks, so the ratio is not 1 before the first update and inline and coarse
    differ (a GPT-2 config's default dropout is 0.1)"""


cfg = GRPOConfig()
tokenizer = char_tokenizer()
task = AdditionTask(cfg.max_operand, heldout_fraction=cfg.heldout_fraction, seed=cfg.seed)


def reward_fn(prompt: str, completion: str) -> float:
    """1 for the exact sum, else 0 (the notebook's reward cell; edit it while training)."""
    return exact_answer_reward(prompt, completion)


# ----------------------------------------------------------------------------- the model
def make_model(cfg: GRPOConfig, tokenizer, weights: dict | None = None):
    """The model every fragment holds a copy of: ``cfg.model`` (or a small Llama built from
    ``cfg``'s sizes, seeded by ``cfg.seed``), with ``weights`` loaded when given. It seeds
    torch's generator with ``cfg.seed`` first, whatever the model's source: the draws the
    cell makes after it (generate's sampling) follow the seed, not what the process drew
    before (a model passed as an object or a directory draws nothing to build)."""
    torch.manual_seed(cfg.seed)
    model = load_causal_lm(
        cfg.model, tokenizer, hidden=cfg.hidden, layers=cfg.layers, heads=cfg.heads, context=cfg.context, seed=cfg.seed
    )
    if weights is not None:
        model.load_state_dict(weights)
    return model


# ----------------------------------------------------------------------------- acting
def check_config(cfg: GRPOConfig) -> None:
    """Raise :class:`LLMInputError` for settings GRPO cannot learn with, saying why: read
    where they are used each iteration (prompts, generate, learner), so ``%fdg update cfg``
    and ``--set`` are checked too.

    >>> check_config(GRPOConfig(group_size=1))
    Traceback (most recent call last):
    ...
    workbench.llm.errors.LLMInputError: GRPO needs group_size ≥ 2, got 1: a completion's advantage is its reward against the others sampled for the same prompt, and one completion has none to compare with (its standard deviation is undefined). Sample at least 2 per prompt (8 is usual).
    """

    def whole(name: str, least: int) -> None:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise LLMInputError(f"GRPO needs {name} ≥ {least}, got {value!r}" + _WHY.get(name, "."))

    whole("group_size", 2)
    whole("prompts_per_step", 1)
    whole("max_new_tokens", 1)
    if not cfg.temperature > 0:
        raise LLMInputError(
            f"GRPO needs temperature > 0, got {cfg.temperature!r}: "
            + (
                "a negative one samples the least likely tokens first. "
                if cfg.temperature < 0
                else "0 is greedy decoding, so the completions of a prompt are all the same, every advantage is 0 "
                "and nothing is learned (held-out accuracy is measured greedily already). "
            )
            + "Sample at a positive temperature (1.0 is the model's own distribution)."
        )
    if not 0 < cfg.top_p <= 1:
        raise LLMInputError(
            f"GRPO needs 0 < top_p ≤ 1, got {cfg.top_p!r}: it is the probability mass sampled "
            "from (1 keeps every token; near 0 is greedy, so every completion of a prompt is the same)."
        )
    for name in ("clip_coef", "max_grad_norm"):
        if not getattr(cfg, name) > 0:
            raise LLMInputError(f"GRPO needs {name} > 0, got {getattr(cfg, name)!r}" + _WHY[name])
    for name in ("kl_coef", "learning_rate"):
        if not getattr(cfg, name) >= 0:
            raise LLMInputError(f"GRPO needs {name} ≥ 0, got {getattr(cfg, name)!r} (0 turns it off).")


_WHY = {
    "group_size": (
        ": a completion's advantage is its reward against the others sampled for the same prompt, "
        "and one completion has none to compare with (its standard deviation is undefined). Sample "
        "at least 2 per prompt (8 is usual)."
    ),
    "prompts_per_step": ": each step samples that many distinct prompts.",
    "max_new_tokens": ": a completion needs room for one token at least (its <eos> counts).",
    "clip_coef": ": the ratio is clipped to [1 - clip_coef, 1 + clip_coef] (0.2 is PPO's).",
    "max_grad_norm": ": the gradient's norm is clipped to it (1.0 is usual).",
}


def prompt_batch(task: AdditionTask, rng: np.random.Generator, cfg: GRPOConfig, replicas: int = 1) -> list[str]:
    """This replica's share of ``cfg.prompts_per_step`` training prompts, each repeated
    ``group_size`` times in a row (a group stays whole on every replica)."""
    check_config(cfg)
    count = max(1, cfg.prompts_per_step // replicas)
    return [p for p in task.sample(rng, count) for _ in range(cfg.group_size)]


def generate_completions(policy, tokenizer, prompt_ids, prompt_mask, cfg: GRPOConfig):
    """``(tokens, completion_mask, logp)`` sampled by ``policy`` at ``cfg``'s temperature and
    top-p; logs the generated tokens per second. Out of memory, an :class:`LLMInputError`
    says the sizes and what to lower."""
    check_config(cfg)
    started = time.perf_counter()
    try:
        out = sample(
            policy,
            prompt_ids,
            prompt_mask,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id,
            cuda_graphs=_graphs(cfg),
        )
    except torch.OutOfMemoryError as exc:
        raise LLMInputError(
            f"generate ran out of memory sampling {prompt_ids.shape[0]} completions ({cfg.prompts_per_step} "
            f"prompts × group_size {cfg.group_size}, split over the replicas) of up to "
            f"{prompt_ids.shape[1]} + {cfg.max_new_tokens} tokens with a {count_parameters(policy):,}-"
            "parameter model: lower prompts_per_step, group_size or max_new_tokens, or use more "
            "generate replicas."
        ) from exc
    generated = float(out.completion_mask.sum())
    if model_device(policy).type == "cuda":  # on a GPU: the graphs replaying (prefill, decode, by shape)
        wb.log("perf/generate_cuda_graphs", captured_graphs(policy))
    wb.log("perf/generated_tokens", generated)
    wb.log("perf/generate_tokens_per_s", generated / max(time.perf_counter() - started, 1e-9), prog_bar=True)
    return out.tokens, out.completion_mask, out.logp


def reference_logp(reference, prompt_ids, prompt_mask, tokens, completion_mask, cfg: GRPOConfig):
    """The frozen reference's log-probabilities of the completion tokens ``[B, C]`` (zeros,
    with no forward pass, while ``cfg.kl_coef`` is 0)."""
    if not cfg.kl_coef:
        return torch.zeros(tokens.shape, dtype=torch.float32, device=tokens.device)
    with torch.no_grad():
        return sequence_logp(
            reference, prompt_ids, prompt_mask, tokens, completion_mask, cfg.temperature, cuda_graphs=_graphs(cfg)
        )


def _graphs(cfg) -> bool:
    return getattr(cfg, "cuda_graphs", True)  # a config pickled before the field: as it was


# ----------------------------------------------------------------------------- the update
def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """Each reward minus its group's mean, over the group's standard deviation (unbiased, as
    TRL's) plus ``eps``: a group whose completions all scored the same has advantage 0.

    >>> [round(a, 3) for a in group_advantages(torch.tensor([1., 0., 0., 0., 1., 1.]), 3).tolist()]
    [1.155, -0.577, -0.577, -1.155, 0.577, 0.577]
    """
    groups = rewards.reshape(-1, group_size)
    mean, std = groups.mean(1, keepdim=True), groups.std(1, keepdim=True)
    return ((groups - mean) / (std + eps)).reshape(-1)


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, *, clip_coef: float, kl_coef: float):
    """GRPO's loss on ``[B, C]`` token log-probabilities: the clipped surrogate of PPO with the
    sequence's advantage on every token, plus ``kl_coef`` × the k3 estimate of the KL to the
    reference, averaged over the completion tokens of the whole batch (``mask`` 1: prompt and
    padding tokens carry no loss). Returns ``(loss, stats)``."""
    loss, clip_fraction, kl = _loss_terms(
        logp, old_logp, ref_logp, advantages, mask, clip_coef=clip_coef, kl_coef=kl_coef
    )
    stats = {"losses/clip_fraction": float(clip_fraction)}
    if kl_coef:  # with the reference skipped there is no KL to measure
        stats["losses/kl"] = float(kl)
    return loss, stats


def _loss_terms(logp, old_logp, ref_logp, advantages, mask, *, clip_coef: float, kl_coef: float):
    """:func:`grpo_loss` as tensors ``(loss, clip fraction, mean KL)``, nothing read on the
    host: the update's CUDA graph records it whole."""
    ratio = (logp - old_logp).exp()
    adv = advantages[:, None]
    per_token = -torch.min(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv)
    log_ref_ratio = ref_logp - logp
    kl = log_ref_ratio.exp() - log_ref_ratio - 1
    if kl_coef:
        per_token = per_token + kl_coef * kl
    tokens = mask.sum().clamp(min=1)
    loss = (per_token * mask).sum() / tokens
    with torch.no_grad():
        clipped = ((ratio - 1).abs() > clip_coef).float()
        return loss, (clipped * mask).sum() / tokens, (kl * mask).sum() / tokens


def _flat(x) -> torch.Tensor:
    """``[T, N, …]`` (as step values reach the learner) → ``[T·N, …]``, a torch tensor."""
    x = torch.as_tensor(x)
    return x.reshape(-1, *x.shape[2:])


def grpo_update(
    model, optimizer, cfg: GRPOConfig, prompt_ids, prompt_mask, tokens, completion_mask, logp, ref_logp, rewards
) -> dict[str, float]:
    """One GRPO step on a ``[T, N, …]`` batch of completions (groups of ``group_size`` in a
    row); logs and returns the metrics. The learning rate is read from ``cfg`` each time."""
    check_config(cfg)
    started = time.perf_counter()
    device = model_device(model)  # the batch goes where the model is (replica.device)
    graphed = device.type == "cuda" and _graphs(cfg) and _one_learner()
    # each distinct prompt's forward once in the update's graph too: found before it, on the
    # host where the prompts were encoded (on the GPU it would wait for the queued work)
    shared = graphable_prompts(model, _flat(prompt_ids), _flat(prompt_mask)) if graphed else None
    prompt_ids, prompt_mask, tokens = (_flat(x).to(device) for x in (prompt_ids, prompt_mask, tokens))
    mask, old_logp, ref_logp = (_flat(x).to(device) for x in (completion_mask, logp, ref_logp))
    rewards = torch.as_tensor(np.asarray(rewards, dtype=np.float32)).reshape(-1).to(device)
    advantages = group_advantages(rewards, cfg.group_size)
    optimizer.param_groups[0]["lr"] = cfg.learning_rate
    batch = (prompt_ids, prompt_mask, tokens, mask, old_logp, ref_logp, advantages) + (shared or ())
    params = [p for p in model.parameters() if p.requires_grad]

    def step(_order, batch) -> tuple:  # the whole batch, in order: advantages belong to groups
        return _grpo_step(model, optimizer, cfg, params, *batch)

    model.train(getattr(cfg, "dropout", False))  # (a config pickled before the field: off)
    out = None
    if graphed:
        out = graphed_update(
            model,
            optimizer,
            (cfg.clip_coef, cfg.kl_coef, cfg.max_grad_norm, cfg.temperature),
            batch,
            1,
            [slice(0, prompt_ids.shape[0])],
            step,
            shuffle=False,
            what="the GRPO update",
        )
    if out is None:
        loss, clip_fraction, kl = step(None, batch)
        # freed until the next update, as TRL's trainer does: the weights' size less while the
        # model samples and scores (a replayed update keeps them: the graph writes them in place)
        optimizer.zero_grad(set_to_none=True)
    else:
        loss, clip_fraction, kl = out
    model.eval()
    stats = {"losses/clip_fraction": float(clip_fraction)}
    if device.type == "cuda":  # 1 once the update is captured (0: eager, warming up, or capturing failed)
        stats["perf/update_cuda_graph"] = float(update_captured(model))
    if cfg.kl_coef:  # with the reference skipped there is no KL to measure
        stats["losses/kl"] = float(kl)
    trained = float(mask.sum())
    stats.update(
        {
            "losses/loss": float(loss),
            "charts/reward_mean": rewards.mean().item(),
            "charts/reward_std": rewards.std().item() if rewards.numel() > 1 else 0.0,
            "charts/completion_length": trained / mask.shape[0],
            "charts/learning_rate": cfg.learning_rate,
            "perf/trained_tokens_per_s": trained / max(time.perf_counter() - started, 1e-9),
        }
    )
    for name, number in stats.items():
        wb.log(name, number, prog_bar=name == "charts/reward_mean")  # beside held-out accuracy in the bar
    return stats


def _grpo_step(
    model, optimizer, cfg, params, prompt_ids, prompt_mask, tokens, mask, old_logp, ref_logp, advantages, *shared
) -> tuple:
    """One Adam step of GRPO's loss; returns ``(loss, clip fraction, KL)`` as detached
    tensors, read once after the step (or after its graph's replay). ``shared``: the
    distinct prompts (:func:`~workbench.llm.generation.graphable_prompts`), when found."""
    new_logp = sequence_logp(model, prompt_ids, prompt_mask, tokens, mask, cfg.temperature, shared=shared or None)
    loss, clip_fraction, kl = _loss_terms(
        new_logp, old_logp, ref_logp, advantages, mask, clip_coef=cfg.clip_coef, kl_coef=cfg.kl_coef
    )
    optimizer.zero_grad()
    loss.backward()
    _clip_gradients(params, cfg.max_grad_norm)
    optimizer.step()
    return loss.detach(), clip_fraction, kl


def _clip_gradients(params: list[torch.Tensor], max_grad_norm: float | None) -> None:
    """The gradient sync point and global-norm clipping. With one learner the gradients are
    scaled where they are, from per-tensor norms (as ``torch.nn.utils.clip_grad_norm_``):
    PPO's ``_sync_and_clip`` builds one flat vector and a scaled copy of it, two model sizes
    of memory at the update's peak, which a language model cannot spare. Several learners
    all-reduce that flat vector (one collective a step), as PPO does."""
    if not _one_learner():
        _sync_and_clip(params, max_grad_norm)
        return
    grads = [p.grad for p in params if p.grad is not None]
    if max_grad_norm and grads:
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_mul_(grads, (max_grad_norm / (norm + 1e-6)).clamp(max=1.0))


# ----------------------------------------------------------------------------- the fragments
# Each entry is one notebook cell: (magic line, body). The notebook holds them verbatim.
FRAGMENT_CELLS: list[tuple[str, str]] = [
    (
        "%%fragment prompts --init",
        """\
rng = np.random.default_rng(cfg.seed + replica.index)   # this replica's draws of training prompts
""",
    ),
    (
        "%%fragment learner --init",
        """\
model = make_model(cfg, tokenizer).to(replica.device)
optimizer = adam(model.parameters(), cfg.learning_rate, eps=1e-8, device=replica.device)   # CPU: torch's fused kernel
update, dropped = 0, 0
weights = model.state_dict()
reference_weights = weights_copy(model)   # the learner keeps them: checkpoints and re-placements carry them
""",
    ),
    (
        "%%fragment generate --init",
        """\
policy = make_model(cfg, tokenizer).to(replica.device)
load_weights(policy, weights)          # the handed weights become the policy's own: in memory once
policy_version = update                # the learner's update count these weights come from
""",
    ),
    (
        "%%fragment reference --init",
        """\
reference = frozen(make_model(cfg, tokenizer)).to(replica.device)
load_weights(reference, reference_weights)   # the starting weights, frozen
""",
    ),
    (
        "%%fragment prompts",
        """\
prompt_texts = prompt_batch(task, rng, cfg, replica.count)
""",
    ),
    (
        "%%fragment generate",
        """\
prompt_ids, prompt_mask = encode_prompts(tokenizer, prompt_texts, task.prompt_width,
                                         max_new_tokens=cfg.max_new_tokens, context=context_length(policy))
tokens, completion_mask, logp = generate_completions(policy, tokenizer, prompt_ids, prompt_mask, cfg)
sampled_by = np.full(len(prompt_texts), policy_version)
""",
    ),
    (
        "%%fragment reward",
        """\
rewards = score_completions(reward_fn, prompt_texts, decode_completions(tokenizer, tokens))
""",
    ),
    (
        "%%fragment reference",
        """\
ref_logp = reference_logp(reference, prompt_ids, prompt_mask, tokens, completion_mask, cfg)
""",
    ),
    (
        "%%fragment learner",
        """\
staleness = update - sampled_by.min()   # updates since the oldest sampling weights
if staleness <= cfg.max_staleness:      # a staler batch (a slow replica under async) is dropped
    wb.log("charts/staleness", staleness)
    grpo_update(model, optimizer, cfg, prompt_ids, prompt_mask, tokens, completion_mask, logp, ref_logp, rewards)
    update += 1
    if update % cfg.eval_every == 0:
        wb.log("charts/heldout_accuracy", heldout_accuracy(model, tokenizer, task), prog_bar=True)
else:
    dropped += 1
    wb.log("charts/dropped_stale_batches", dropped)
weights = model.state_dict()
""",
    ),
    (
        "%%fragment generate --every iteration",
        """\
load_weights(policy, weights)
policy_version = update
""",
    ),
]


def build_fdg(namespace: dict | None = None):
    """The GRPO FDG from :data:`FRAGMENT_CELLS`, reading names from ``namespace`` (default:
    this module, so ``cfg``, ``task``, ``tokenizer``, ``reward_fn`` and the helpers come
    from here)."""
    fdg = wb.FDG(namespace=namespace if namespace is not None else globals())
    for line, body in FRAGMENT_CELLS:
        fdg.add_cell(line, body)
    return fdg
