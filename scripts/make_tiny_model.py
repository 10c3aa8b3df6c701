"""Make the tiny random-weight Llama the real-engine tests serve, with nothing downloaded.

    python scripts/make_tiny_model.py --out DIR

writes, from one seeded set of weights and one locally trained tokenizer:

    DIR/hf/         a Hugging Face folder (config.json, model.safetensors, tokenizer.json,
                    tokenizer_config.json with a ChatML chat template, generation_config.json)
                    that vLLM loads as LlamaForCausalLM
    DIR/tiny.gguf   the same model for llama.cpp (llama architecture, F32, gpt2-style BPE vocab
                    with its merges, the same chat template)
    DIR/hf-small/, DIR/small.gguf
                    a ~20x larger model (SMALL_SHAPE), same tokenizer, in both formats
    DIR/hf-quality/, DIR/quality.gguf
                    a model whose predictions mean something, for the quality tests: the
                    bigram statistics of held-out pseudo-English (the tokenizer's own corpus
                    generator) factored into its embeddings and output head (QUALITY_SHAPE;
                    small random layers on top), so its perplexity is low on that text and
                    quantizing its weights changes its next-token distributions measurably
    DIR/quality-eval.jsonl
                    held-out texts of that corpus ({"text": …} a line)
    DIR/model.json  what was made (shape, vocab size, special token ids), for tests to read

Needs numpy, tokenizers, safetensors and gguf — not torch: the HF folder is plain safetensors.
The tokenizer is a byte-level BPE (any byte encodes) trained on generated pseudo-words, so
random weights stream partial UTF-8 characters exactly as a real byte-level model can.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

SEED = 20261202
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# tiny: 2 layers, hidden 128, 2 heads of 64 (vLLM's CPU attention rejects head dim 16). vLLM's
# CPU build spends ~18 ms a step on it, mostly its own overhead: slow enough to queue at a few
# requests per second, which is what the tests need.
SHAPE: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
}
# small: the same tokenizer in a model ~20x larger. llama-server runs the tiny one at ~0.2 ms
# a token and vLLM's CPU build at ~5 ms a step, so fast that on 2 cores the HTTP client, not
# the engine, saturates first; on this one both spend ~7-12 ms a step (one thread), and
# max_num_seqs / -np visibly decides throughput.
SMALL_SHAPE: dict[str, Any] = {
    **SHAPE,
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
}
# quality: K-quants need rows that are multiples of 256 (hidden 512, intermediate 1536).
QUALITY_SHAPE: dict[str, Any] = {
    **SHAPE,
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
}
VOCAB_SIZE = 2048
QUALITY_TRAIN_LINES = 40000
QUALITY_EVAL_TEXTS = 200


def corpus(n_lines: int, rng: random.Random) -> list[str]:
    """Pseudo-English from a syllable grammar, plus digits and punctuation: enough variety
    for BPE to learn a few thousand merges, and deterministic."""
    onsets = [
        "",
        "b",
        "c",
        "d",
        "f",
        "g",
        "h",
        "k",
        "l",
        "m",
        "n",
        "p",
        "r",
        "s",
        "t",
        "v",
        "w",
        "th",
        "st",
        "tr",
        "pl",
        "ch",
        "sh",
        "gr",
    ]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
    codas = ["", "", "n", "r", "s", "t", "l", "nd", "ng", "st", "ck"]
    words = [
        "".join(
            rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
            for _ in range(rng.randint(1, 3))
        )
        for _ in range(3000)
    ]
    common = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "that",
        "it",
        "for",
        "on",
        "with",
        "as",
        "was",
        "be",
        "by",
        "this",
        "are",
        "or",
        "from",
        "at",
        "an",
        "server",
        "token",
        "model",
        "request",
        "latency",
        "queue",
        "batch",
        "cache",
        "memory",
    ]
    lines = []
    for _ in range(n_lines):
        n = rng.randint(4, 24)
        ws = [rng.choice(common) if rng.random() < 0.3 else rng.choice(words) for _ in range(n)]
        if rng.random() < 0.2:
            ws.append(str(rng.randint(0, 99999)))
        s = " ".join(ws)
        lines.append(s[0].upper() + s[1:] + rng.choice([".", ".", "?", "!", ","]))
    return lines


def train_tokenizer(out: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(20000, random.Random(SEED)), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    return tok


def random_weights(vocab: int, shape: dict[str, Any]) -> dict[str, np.ndarray]:
    """HF LlamaForCausalLM tensor names and (out, in) shapes, float32."""
    rng = np.random.default_rng(SEED)
    h, ff = shape["hidden_size"], shape["intermediate_size"]
    hd = shape["head_dim"]
    q_out, kv_out = shape["num_attention_heads"] * hd, shape["num_key_value_heads"] * hd

    def lin(o: int, i: int) -> np.ndarray:
        return (rng.standard_normal((o, i)) * 0.02).astype(np.float32)

    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": lin(vocab, h)}
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "self_attn.q_proj.weight"] = lin(q_out, h)
        w[p + "self_attn.k_proj.weight"] = lin(kv_out, h)
        w[p + "self_attn.v_proj.weight"] = lin(kv_out, h)
        w[p + "self_attn.o_proj.weight"] = lin(h, q_out)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "mlp.gate_proj.weight"] = lin(ff, h)
        w[p + "mlp.up_proj.weight"] = lin(ff, h)
        w[p + "mlp.down_proj.weight"] = lin(h, ff)
    w["model.norm.weight"] = np.ones(h, np.float32)
    w["lm_head.weight"] = lin(vocab, h)
    return w


def bigram_weights(tok: Any, vocab: int, shape: dict[str, Any]) -> dict[str, np.ndarray]:
    """Weights whose output is (close to) a bigram model of the corpus: the centred log
    probabilities of the next token given the current one (add-0.1 smoothing), factored by a
    truncated SVD into the embeddings and the output head; the layers are the usual small
    random ones, a perturbation on top."""
    lines = corpus(QUALITY_TRAIN_LINES + 3 * QUALITY_EVAL_TEXTS, random.Random(SEED))
    lines = lines[:QUALITY_TRAIN_LINES]
    counts = np.zeros((vocab, vocab), dtype=np.float64)
    for enc in tok.encode_batch(lines):
        ids = enc.ids
        for a, b in zip(ids[:-1], ids[1:], strict=True):
            counts[a, b] += 1.0
    logp = np.log((counts + 0.1) / (counts + 0.1).sum(axis=1, keepdims=True))
    logp -= logp.mean(axis=1, keepdims=True)
    h = shape["hidden_size"]
    u, sv, vt = np.linalg.svd(logp)
    root = np.sqrt(sv[: h - 1])
    emb = u[:, : h - 1] * root
    # One dimension fills every embedding up to the same norm, so the RMSNorm in front of the
    # head divides every row by the same number and the logits keep their scale.
    norm2 = (emb**2).sum(axis=1)
    full = float(norm2.max()) * 1.01
    emb = np.concatenate([emb, np.sqrt(full - norm2)[:, None]], axis=1)
    head = np.concatenate([vt[: h - 1].T * root, np.zeros((vocab, 1))], axis=1)
    head *= np.sqrt(full / h)
    w = random_weights(vocab, shape)
    # C order: safetensors writes the buffer as it lies (an SVD factor is often Fortran-ordered)
    w["model.embed_tokens.weight"] = np.ascontiguousarray(emb, dtype=np.float32)
    w["lm_head.weight"] = np.ascontiguousarray(head, dtype=np.float32)
    return w


def quality_texts() -> list[str]:
    """Held-out texts of the same pseudo-English (the same words, lines after the ones the
    bigrams were counted on), three lines each, for perplexity."""
    lines = corpus(QUALITY_TRAIN_LINES + 3 * QUALITY_EVAL_TEXTS, random.Random(SEED))
    held = lines[QUALITY_TRAIN_LINES:]
    return [" ".join(held[i : i + 3]) for i in range(0, len(held), 3)]


def write_hf(
    out: Path, tok: Any, weights: dict[str, np.ndarray], ids: dict[str, int], shape: dict[str, Any]
) -> None:
    from safetensors.numpy import save_file

    vocab = tok.get_vocab_size()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **shape,
        "hidden_act": "silu",
        "vocab_size": vocab,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": shape["max_position_embeddings"],
        "chat_template": CHATML,
        "added_tokens_decoder": {
            str(ids[s]): {
                "content": s,
                "special": True,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
            }
            for s in SPECIALS
        },
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
    (out / "special_tokens_map.json").write_text(
        json.dumps(
            {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
            indent=2,
        )
    )
    gen = {
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
    }
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))


def _rope_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    # HF rotates halves, GGML's llama rope rotates adjacent pairs: reorder rows as
    # convert_hf_to_gguf.py does, so both files are the same function.
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def write_gguf(
    path: Path,
    tok: Any,
    weights: dict[str, np.ndarray],
    ids: dict[str, int],
    shape: dict[str, Any],
    name: str,
) -> None:
    import gguf

    vocab_size = tok.get_vocab_size()
    inv = {i: t for t, i in tok.get_vocab().items()}
    tokens = [inv[i] for i in range(vocab_size)]
    types = [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens]
    model = json.loads(tok.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"servetune-{name}-llama")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(shape["max_position_embeddings"])
    w.add_embedding_length(shape["hidden_size"])
    w.add_block_count(shape["num_hidden_layers"])
    w.add_feed_forward_length(shape["intermediate_size"])
    w.add_head_count(shape["num_attention_heads"])
    w.add_head_count_kv(shape["num_key_value_heads"])
    w.add_rope_dimension_count(shape["head_dim"])
    w.add_rope_freq_base(shape["rope_theta"])
    w.add_layer_norm_rms_eps(shape["rms_norm_eps"])
    w.add_vocab_size(vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")  # llama.cpp: LLAMA_VOCAB_PRE_TYPE_GPT2
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_eos_token_id(ids["<|im_end|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for i in range(shape["num_hidden_layers"]):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}"] = f"blk.{i}.{gg}"
    for hf_name, arr in weights.items():
        if hf_name.endswith("q_proj.weight"):
            arr = _rope_permute(arr, shape["num_attention_heads"])
        elif hf_name.endswith("k_proj.weight"):
            arr = _rope_permute(arr, shape["num_key_value_heads"])
        w.add_tensor(names[hf_name], np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    out: Path = args.out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "hf").mkdir(parents=True)
    tok = train_tokenizer(tmp / "hf")
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    vocab = tok.get_vocab_size()
    weights = random_weights(vocab, SHAPE)
    write_hf(tmp / "hf", tok, weights, ids, SHAPE)
    write_gguf(tmp / "tiny.gguf", tok, weights, ids, SHAPE, "tiny")
    small = random_weights(vocab, SMALL_SHAPE)
    (tmp / "hf-small").mkdir()
    shutil.copy(tmp / "hf" / "tokenizer.json", tmp / "hf-small" / "tokenizer.json")
    write_hf(tmp / "hf-small", tok, small, ids, SMALL_SHAPE)
    write_gguf(tmp / "small.gguf", tok, small, ids, SMALL_SHAPE, "small")
    quality = bigram_weights(tok, vocab, QUALITY_SHAPE)
    (tmp / "hf-quality").mkdir()
    shutil.copy(tmp / "hf" / "tokenizer.json", tmp / "hf-quality" / "tokenizer.json")
    write_hf(tmp / "hf-quality", tok, quality, ids, QUALITY_SHAPE)
    write_gguf(tmp / "quality.gguf", tok, quality, ids, QUALITY_SHAPE, "quality")
    (tmp / "quality-eval.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in quality_texts())
    )
    info = {
        "shape": SHAPE,
        "small_shape": SMALL_SHAPE,
        "quality_shape": QUALITY_SHAPE,
        "vocab_size": vocab,
        "special_ids": ids,
        "seed": SEED,
        "served_model_name": "tiny",
        "files": {
            "hf": "hf",
            "gguf": "tiny.gguf",
            "small_hf": "hf-small",
            "small_gguf": "small.gguf",
            "quality_hf": "hf-quality",
            "quality_gguf": "quality.gguf",
            "quality_eval": "quality-eval.jsonl",
        },
    }
    (tmp / "model.json").write_text(json.dumps(info, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)  # all or nothing: a half-made model is never found at the cache path
    print(f"tiny model written to {out} (vocab {tok.get_vocab_size()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
