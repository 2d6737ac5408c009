"""The tiny base model's tokenizer: byte-level BPE trained here, deterministic, easy to copy with.

- **A name tokenizes the same everywhere.** Qwen's pre-tokenizer glues a leading space or quote
  to a word, so a name has two spellings (in a result list and in a JSON query); here text
  splits into runs of letters, single digits, other symbols and whitespace.
- **A year is one token.** Every year 1000..2030 is an added token matching only a whole
  number, so "18745" is never "1874" + "5".
- **The agent markup are single, non-special tokens** (as in Qwen), so decoding with
  ``skip_special_tokens=True`` keeps them for the format check and TRL's tool-call parser.
"""

from __future__ import annotations

from typing import Iterable

#: Qwen's chat and vision tokens, in Qwen's order (special: dropped by skip_special_tokens).
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                  "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                  "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                  "<|image_pad|>", "<|video_pad|>")
#: Placeholders the model must never generate on its own (``suppress_tokens``).
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                 "<|video_pad|>")
#: The agent protocol's tags (``vsearcher_lite.agent.protocol``): added, not special.
MARKUP_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                 "</tool_response>", "<answer>", "</answer>")
FIRST_YEAR, LAST_YEAR = 1000, 2030
YEAR_TOKENS = tuple(str(y) for y in range(FIRST_YEAR, LAST_YEAR + 1))

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
DOC_SEPARATOR = "<|endoftext|>"  # between packed pretraining documents

#: Letters, one digit, other symbols, whitespace: a word never takes a space or quote with it.
PRE_TOKENIZER_PATTERN = r"\p{L}+|\p{N}|[^\s\p{L}\p{N}]+|\s+"
DEFAULT_VOCAB_SIZE = 2048  # BPE vocabulary before the added tokens


def build_tokenizer(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE,
                    min_frequency: int = 2):
    """Train the tokenizer on ``texts`` (deterministically) and wrap it for transformers, with
    left padding: batched generation needs the prompt ends aligned."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.normalizer = normalizers.NFC()
    raw.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRE_TOKENIZER_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(texts, trainer)
    plain = dict(normalized=False, special=False)
    raw.add_tokens([AddedToken(t, single_word=False, **plain) for t in MARKUP_TOKENS])
    # single_word: "1874" matches only as a whole number, never inside "18745" or "x1874".
    raw.add_tokens([AddedToken(y, single_word=True, **plain) for y in YEAR_TOKENS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        padding_side="left",
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    extra = [t for t in SPECIAL_TOKENS if t not in (EOS_TOKEN, PAD_TOKEN)]
    tok.add_special_tokens({"additional_special_tokens": extra},
                           replace_extra_special_tokens=False)
    return tok


def token_id(tokenizer, token: str) -> int:
    """The id of one token; ``KeyError`` if the tokenizer does not have it as a single token."""
    i = tokenizer.convert_tokens_to_ids(token)
    if i is None or i == tokenizer.unk_token_id or tokenizer.convert_ids_to_tokens(i) != token:
        raise KeyError(f"the tokenizer has no single token {token!r}")
    return int(i)


def vision_token_ids(tokenizer) -> list[int]:
    """Ids of the vision placeholders: what ``generation_config.suppress_tokens`` must hold."""
    return [token_id(tokenizer, t) for t in VISION_TOKENS]


def year_token_ids(tokenizer) -> dict[int, int]:
    """``{token id: year}`` for the single-token years (SFT weights these in its loss)."""
    return {token_id(tokenizer, y): int(y) for y in YEAR_TOKENS}


def markup_token_ids(tokenizer) -> dict[str, int]:
    """``{tag: token id}`` for the agent markup and the chat tokens that pretraining never shows."""
    return {t: token_id(tokenizer, t) for t in MARKUP_TOKENS + ("<|im_start|>", "<|im_end|>")}


def pieces(tokenizer, text: str) -> list[str]:
    """The decoded text of each token of ``text`` (a readable view of how it is split).

    >>> # pieces(tok, 'x "Orsk"') == ['x', ' ', '"', 'Orsk', '"']
    """
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return [tokenizer.decode([i]) for i in ids]
