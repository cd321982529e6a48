"""A tiny random Llama with a character-level ChatML tokenizer, for tests that need a real model
(generation, log-probs, training) in milliseconds. pad == eos == <|im_end|>, as in SmolLM2."""
from __future__ import annotations

from pathlib import Path

import torch

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_model(out: Path, seed: int = 0, max_positions: int = 256) -> Path:
    """Save a 2-layer random Llama and its tokenizer to ``out``; return ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for b in [10, *range(32, 127)]:  # printable ASCII only: every sampled token decodes cleanly
        vocab[byte_level.pre_tokenize_str(chr(b))[0][0]] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<|endoftext|>"))
    tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<|endoftext|>", bos_token="<|im_start|>",
                                   eos_token="<|im_end|>", pad_token="<|im_end|>")
    fast.chat_template = CHATML
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                      initializer_range=0.3, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                      pad_token_id=2)
    model = LlamaForCausalLM(cfg)
    out = Path(out)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out
