"""The answerability reader: a cross-encoder that reads a question and a passage together and
scores whether the passage answers it (trained here, ``benchmarks/train_answerability.py``; its
int8 ONNX weights ship in the package, so no download)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from importlib.resources import files
from pathlib import Path

import numpy as np

MODEL_DIR = Path(str(files("lookup_knowledge") / "models" / "answerability"))
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def passage_text(title: str | None, breadcrumb: str | None, content: str) -> str:
    """What the reader reads of a block: its title, its breadcrumb where it says more, its text."""
    head = [part for part in (title, breadcrumb) if part]
    if len(head) == 2 and head[1] == head[0]:
        head = head[:1]
    return "\n".join([*head, content])


class AnswerabilityReader:
    """Scores (question, passage) pairs: the probability that the passage answers the question;
    ``bar`` is the score the trained model's validation answers reached and ``max_length`` the
    tokens it reads of a pair (its ``config.json``, unless given)."""

    def __init__(
        self, model_dir: Path = MODEL_DIR, bar: float | None = None, max_length: int | None = None
    ) -> None:
        from tokenizers import Tokenizer

        from lookup_knowledge.adapters.exported_encoder import onnxruntime_session

        if not (model_dir / "model.onnx").is_file():
            raise FileNotFoundError(
                f"answerability.reader: no model in {model_dir} (benchmarks/train_answerability.py all)"
            )
        config = json.loads((model_dir / "config.json").read_text()) if bar is None else {}
        self.bar = float(config["bar"]) if bar is None else bar
        self.max_length = max_length or int(config.get("max_length", 256))
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length, strategy="longest_first")
        self.tokenizer.enable_padding()
        self.session = onnxruntime_session(model_dir / "model.onnx")

    def scores(self, question: str, passages: Sequence[str]) -> np.ndarray:
        """Each passage's probability of answering ``question`` (one batch)."""
        if not passages:
            return np.zeros(0, dtype=np.float32)
        encoded = self.tokenizer.encode_batch([(question, p) for p in passages])
        arrays = (
            np.array([e.ids for e in encoded], dtype=np.int64),
            np.array([e.attention_mask for e in encoded], dtype=np.int64),
            np.array([e.type_ids for e in encoded], dtype=np.int64),
        )
        logits = self.session(dict(zip(_INPUTS, arrays, strict=True)))
        return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float32).reshape(-1)))


@cache
def shipped_reader() -> AnswerabilityReader:
    """The reader the package ships, loaded once per process."""
    return AnswerabilityReader()
