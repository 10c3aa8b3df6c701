from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BPE tokenizer trained here, offline, on generated text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    words = [f"{a}{b}" for a in "bcdfghklmnprstvz" for b in ("a", "e", "io", "ou", "ank", "rest")]
    text = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(400)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(text, trainer)
    d = tmp_path_factory.mktemp("tok")
    tok.save(str(d / "tokenizer.json"))
    return d
