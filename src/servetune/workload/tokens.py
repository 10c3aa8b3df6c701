"""Token counters: a local Hugging Face tokenizer (offline), or an approximate counter.

Nothing is ever downloaded: a tokenizer is a local folder holding ``tokenizer.json`` or the
file itself. Without one, :class:`ApproxTokenizer` counts word pieces and every figure built
on it is marked approximate in the result.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from servetune.errors import ConfigError

# Common English words that are one token (with their leading space) in the BPE vocabularies
# of Llama, Qwen, Mistral and GPT; random prompts built from them have a predictable length.
_WORDS = (
    "the of and to in is was for that on as with by at from his an are had not be this but "
    "which or have one were her all she there their been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may "
    "then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three small place house water "
    "part find line light hand high end word every found still name left large must turn "
    "point city play home read page land side keep help mind open seem next tree start ask "
    "late run test kind move live form food book tell head stand need show try story fact "
    "room eye full sea fire plan rest door road rate level load model cache batch token queue"
).split()
_WORDS = list(dict.fromkeys(_WORDS))

_PIECE = re.compile(r"\w+|[^\w\s]")
_LONG = re.compile(r"\w{8,}")
_CLASSES = bytes(
    (ord("w") if chr(c).isalnum() or c == 0x5F else ord(" ") if chr(c).isspace() else ord("p"))
    if c < 128
    else ord(" ")
    for c in range(256)
)
"""ASCII byte → its class under the piece rule: ``w`` a word character (``\\w``), a space
(``\\s``), ``p`` anything else (a punctuation mark: a piece of its own)."""


def word_pieces(text: str) -> list[str]:
    """What :class:`ApproxTokenizer` counts: the words and punctuation marks of ``text``."""
    return _PIECE.findall(text)


def approx_count(pieces: list[str]) -> int:
    """Tokens in ``pieces`` by the approximate rule: one per word of ≤ 7 characters or
    punctuation mark, a long word one per 7 characters."""
    return sum(1 + (len(p) - 1) // 7 for p in pieces)


class TokenCounter(Protocol):
    """What workload generation needs from a tokenizer."""

    name: str
    exact: bool

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def count(self, text: str) -> int: ...

    def sample_ids(self) -> list[int]:
        """Token ids that random prompts may be drawn from (no special tokens)."""
        ...


class ApproxTokenizer:
    """Word-piece counter: a word of ≤ 7 characters or a punctuation mark is one token.

    Long words count one token per 7 characters. Random prompts use short common words, so
    their length is exact under this counter and close to it under real BPE vocabularies.
    """

    name = "approximate"
    exact = False

    def __init__(self) -> None:
        self._words = list(_WORDS)
        self._index = {w: i for i, w in enumerate(self._words)}

    @property
    def words(self) -> tuple[str, ...]:
        """The one-token words random prompts are built from."""
        return tuple(self._words)

    def count(self, text: str) -> int:
        # = approx_count(word_pieces(text)), without a Python step per piece (the gateway
        # counts every prompt). ASCII text: each character mapped to its class (w, space, p)
        # in C, the first w of each word marked x; then pieces = x's + p's, and a word of L
        # characters is x + (L − 1) w's, holding (L − 1) // 7 runs of 7 w's: its extra.
        if text.isascii():
            b = b" " + text.encode("ascii").translate(_CLASSES)
            b = b.replace(b" w", b" x").replace(b"pw", b"px")
            return b.count(b"x") + b.count(b"p") + b.count(b"wwwwwww")
        n = len(_PIECE.findall(text))
        for word in _LONG.findall(text):
            n += (len(word) - 1) // 7
        return n

    def encode(self, text: str) -> list[int]:
        # Unknown words get ids past the word list; only counts matter for them.
        n = len(self._words)
        return [self._index.get(p, n) for p in _PIECE.findall(text)]

    def decode(self, ids: list[int]) -> str:
        words, n = self._words, len(self._words)
        return " ".join([words[i % n] for i in ids])

    def sample_ids(self) -> list[int]:
        return list(range(len(self._words)))


class HFTokenizer:
    """A Hugging Face fast tokenizer loaded from local files with ``tokenizers``."""

    exact = True

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        p = Path(path).expanduser()
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise ConfigError.over_fields(
                f"no tokenizer at {path}: expected a folder with tokenizer.json or the file itself",
                hint="give {tokenizer} a folder or file (it is loaded offline, never downloaded), "
                "or leave it out to count with the server's /tokenize or approximately",
            )
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise ConfigError(f"cannot load tokenizer {file}: {exc}") from exc
        self.name = str(file)
        special = {i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}
        vocab = self._tok.get_vocab_size(with_added_tokens=False)
        self._all = [i for i in range(vocab) if i not in special]
        self._stable: list[int] | None = None

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=True))

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def sample_ids(self) -> list[int]:
        """Word-like tokens that survive decode → encode when strung together.

        Random ids from the whole vocabulary decode to byte soup that re-tokenizes into a
        different count; tokens that re-encode to themselves when doubled (" the the")
        keep prompt lengths exact. Probed on a sample of the vocabulary, once.
        """
        if self._stable is None:
            import random

            rng = random.Random(0)
            cands = self._all if len(self._all) <= 4000 else rng.sample(self._all, 4000)
            stable = []
            for i in cands:
                text = self._tok.decode([i, i, i], skip_special_tokens=True)
                if text.strip() and self._tok.encode(text, add_special_tokens=False).ids == [i] * 3:
                    stable.append(i)
            self._stable = stable if len(stable) >= 32 else self._all
        return self._stable


def load_tokenizer(path: str | None) -> TokenCounter:
    """The local tokenizer at ``path``, or the approximate counter when none is given."""
    return HFTokenizer(path) if path else ApproxTokenizer()
