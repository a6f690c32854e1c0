"""Causal language models for GRPO: a small one built from a ``transformers`` config, or any
causal LM the user passes (an object or a local directory), checked against its tokenizer.

Example:
    >>> from workbench.llm.tokenizers import char_tokenizer
    >>> tok = char_tokenizer()
    >>> model = tiny_causal_lm(tok, hidden=64, layers=2, context=32, seed=0)
    >>> model.config.vocab_size == len(tok), model.config.num_hidden_layers
    (True, 2)
    >>> count_parameters(model) < 200_000
    True
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from workbench.llm.errors import LLMInputError
from workbench.runtime.values.arrays import tensor_view_key

__all__ = [
    "tiny_causal_lm",
    "load_causal_lm",
    "check_vocabulary",
    "context_length",
    "frozen",
    "frozen_copy",
    "weights_copy",
    "copy_place",
    "DEVICE_COPY_SHARE",
    "load_weights",
    "count_parameters",
    "with_lora",
]


def tiny_causal_lm(
    tokenizer, *, hidden: int = 64, layers: int = 2, heads: int = 4, context: int = 64, seed: int | None = None
):
    """A Llama-architecture causal LM of the given sizes, randomly initialised (``seed`` fixes
    the draw), its vocabulary the tokenizer's. Builds in milliseconds at these sizes."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=context,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        attn_implementation="eager",
    )
    if seed is not None:
        torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def load_causal_lm(
    spec, tokenizer, *, hidden: int = 64, layers: int = 2, heads: int = 4, context: int = 64, seed: int | None = None
):
    """The model GRPO trains, from ``spec``: ``None`` builds :func:`tiny_causal_lm`; a model
    object is copied (the caller's stays as it was); a string or path is a local directory
    ``from_pretrained`` reads (no downloads). The tokenizer must fit it (see
    :func:`check_vocabulary`)."""
    if spec is None:
        model = tiny_causal_lm(tokenizer, hidden=hidden, layers=layers, heads=heads, context=context, seed=seed)
    elif isinstance(spec, (str, Path)):
        from transformers import AutoModelForCausalLM

        if not Path(spec).is_dir():
            raise LLMInputError(
                f"model {str(spec)!r} is not a local directory: workbench loads models "
                "from disk only (there is no model hub here); pass a model object, "
                "a directory written by save_pretrained, or None for a small model "
                "built from a config."
            )
        model = AutoModelForCausalLM.from_pretrained(spec)
    elif isinstance(spec, torch.nn.Module):
        model = copy.deepcopy(spec)
    else:
        raise LLMInputError(
            f"model must be a transformers causal LM, a local directory or None, not {type(spec).__name__}."
        )
    check_vocabulary(model, tokenizer)
    # in eval mode whatever its source: a model object built by hand is in train mode, and
    # generate and the reference would sample and score with its dropout on
    return model.eval()


def check_vocabulary(model, tokenizer) -> None:
    """Raise :class:`LLMInputError` when a token id of ``tokenizer`` has no row in the model's
    embedding (the model would index out of range, or sample ids the tokenizer cannot read)."""
    rows = model.get_input_embeddings().weight.shape[0]
    size = len(tokenizer)
    head = model.get_output_embeddings()  # None for a reward model (a scalar head, no vocabulary)
    if size > rows or (head is not None and head.weight.shape[0] != rows):
        raise LLMInputError(
            f"the tokenizer has {size} tokens but the model's embedding has {rows} rows: they were "
            "not made for each other. Build the model with vocab_size=len(tokenizer) "
            "(tiny_causal_lm does) or pass the tokenizer the model was trained with."
        )


def context_length(model) -> int:
    """The most positions the model was built for (``max_position_embeddings``)."""
    return int(getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions"))


def frozen(model):
    """``model`` itself with gradients off, in eval mode (returned): GRPO's reference for the
    KL term, built fresh by its cell, so no second copy of the weights is made."""
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def frozen_copy(model):
    """A copy of ``model`` with gradients off, in eval mode (``model`` stays as it was)."""
    return frozen(copy.deepcopy(model))


#: :func:`weights_copy` keeps a GPU model's copy on its GPU when the copy needs at most this
#: share of the GPU's free memory, else puts it in host memory. The host copy of the 113M
#: model took 313 ms on the H200 (into pageable memory) and the reference's load of
#: it 76 ms more: ~0.4 s of a 0.8–1.0 s first iteration of GRPO (bench_llm_first_iteration.py,
#: 2026-11-27); a copy on the device takes milliseconds. Capped so a large model's copy never
#: crowds out the update that follows: on a GPU that could not spare it, it goes to the host.
DEVICE_COPY_SHARE = 0.05


def weights_copy(model, *, device_share: float = DEVICE_COPY_SHARE) -> dict[str, torch.Tensor]:
    """A copy of ``model``'s state dict that later training does not change: read only to
    build a model from (GRPO's reference) and by checkpoints. On the CPU it is in host
    memory; a model on a GPU keeps it there while it needs at most ``device_share`` of the
    GPU's free memory (see :data:`DEVICE_COPY_SHARE` and :func:`copy_place`), else it goes
    to host memory, so that a large model's GPU does not hold a second copy of it.

    >>> from workbench.llm.tokenizers import char_tokenizer
    >>> model = tiny_causal_lm(char_tokenizer(), hidden=16, layers=1, context=8, seed=0)
    >>> kept = weights_copy(model)
    >>> _ = model.lm_head.weight.data.add_(1.0)
    >>> bool((kept["lm_head.weight"] == model.lm_head.weight).any()), kept["lm_head.weight"].device.type
    (False, 'cpu')
    """
    state = model.state_dict()
    unique = {tensor_view_key(t): t for t in state.values()}
    target = copy_place({t.device for t in unique.values()}, sum(t.nbytes for t in unique.values()), device_share)
    copies: dict[tuple, torch.Tensor] = {}  # one copy per view: a tied embedding's two names share it
    out = {}
    for name, tensor in state.items():
        key = tensor_view_key(tensor)
        if key not in copies:
            copies[key] = tensor.detach().to(target, copy=True)
        out[name] = copies[key]
    return out


def copy_place(devices: set, nbytes: int, share: float, free_bytes: int | None = None) -> torch.device:
    """Where :func:`weights_copy` puts ``nbytes`` of tensors that live on ``devices``: their
    GPU when they are all on one and ``nbytes`` is at most ``share`` of its free memory
    (``free_bytes``, else asked of the driver), else the host.

    >>> gpu = {torch.device("cuda", 0)}
    >>> copy_place(gpu, 450 * 2**20, 0.05, free_bytes=130 * 2**30), copy_place(gpu, 28 * 2**30, 0.05, free_bytes=70 * 2**30)
    (device(type='cuda', index=0), device(type='cpu'))
    >>> copy_place({torch.device("cpu")}, 1, 1.0), copy_place({torch.device("cuda", 0), torch.device("cuda", 1)}, 1, 1.0, 2**30)
    (device(type='cpu'), device(type='cpu'))
    """
    host = torch.device("cpu")
    if len(devices) != 1 or (device := next(iter(devices))).type != "cuda":
        return host
    if free_bytes is None:
        free_bytes, _ = torch.cuda.mem_get_info(device)
    return device if nbytes <= share * free_bytes else host


def load_weights(model, weights: dict) -> None:
    """Copy the state dict ``weights`` into ``model`` (which keeps its tensors, and their
    addresses: CUDA graphs replaying it read them there), then point ``weights``' entries at
    the model's own tensors. The values stay the same, and the copy a replica was handed is
    freed: the weights are in memory once, not twice (for a language model, its size).

    >>> from workbench.llm.tokenizers import char_tokenizer
    >>> tok = char_tokenizer()
    >>> learner = tiny_causal_lm(tok, hidden=16, layers=1, context=8, seed=0)
    >>> policy = tiny_causal_lm(tok, hidden=16, layers=1, context=8, seed=1)
    >>> handed = weights_copy(learner)
    >>> load_weights(policy, handed)
    >>> handed["lm_head.weight"].data_ptr() == policy.lm_head.weight.data_ptr()
    True
    >>> bool(torch.equal(policy.lm_head.weight, learner.lm_head.weight))
    True
    """
    own = model.state_dict()
    _check_fits(own, weights)  # before copying: load_state_dict copies what fits, then raises
    model.load_state_dict(weights)
    for name in list(weights):
        if name in own:
            weights[name] = own[name]


def _check_fits(own: dict, weights: dict) -> None:
    """Raise (a ``RuntimeError``, as ``load_state_dict``) unless ``weights`` has exactly the
    names of the model's state dict ``own``, each of its shape: a dict that fits in part would
    otherwise leave the model half-loaded.

    >>> _check_fits({"w": torch.zeros(2)}, {"w": torch.zeros(3), "b": torch.zeros(1)})
    Traceback (most recent call last):
    RuntimeError: these weights do not fit the model, nothing was loaded: size mismatch for w: ...
    """
    problems = [
        f"size mismatch for {name}: the weights have {tuple(weights[name].shape)}, the model {tuple(tensor.shape)}"
        for name, tensor in own.items()
        if name in weights and weights[name].shape != tensor.shape
    ]
    missing = [name for name in own if name not in weights]
    unexpected = [name for name in weights if name not in own]
    for label, names in (("missing keys", missing), ("unexpected keys", unexpected)):
        if names:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            problems.append(f"{label} ({len(names)}): {shown}")
    if problems:
        raise RuntimeError(
            "these weights do not fit the model, nothing was loaded: "
            + "; ".join(problems)
            + ". Build the model with the same config as the one the weights come from "
            "(the learner's), or load them with load_state_dict(..., strict=False) yourself."
        )


def count_parameters(model) -> int:
    """Parameters in ``model`` (trainable or not)."""
    return sum(p.numel() for p in model.parameters())


def with_lora(model, *, rank: int = 8, alpha: int = 16, targets=("q_proj", "v_proj")):
    """``model`` wrapped by ``peft`` with LoRA adapters of ``rank`` on ``targets``: only the
    adapters train, and the weights that travel to generate replicas are the whole state
    (adapters included). Needs ``pip install 'workbench-rl[llm]'``."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(
        model,
        LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0, task_type="CAUSAL_LM"),
    )
