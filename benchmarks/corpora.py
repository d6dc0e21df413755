"""Benchmark corpora from ../shared/data: cached embeddings, cached stores, and a multi-domain mix.

``CachedEmbedder`` keeps every embedded text's vector under ``benchmarks/.cache/embeddings``, so
a corpus embedded once (for one store) is never embedded again for another store or a mix.
``classic_scifact_mix`` writes a five-domain BEIR folder: classic-dev's four collections plus
SciFact as the domain ``science`` (its 300 test claims; the abstracts they judge plus a seeded
sample of the others, 1,500 in all, a domain as large as classic-dev's largest), a realistic
neighbour of ``medicine``: both are biomedical abstracts. ``hugo_described_pages`` writes the
queries and judgments of a third set: each hugo-docs page with one domain and its own frontmatter
``description`` (which is not indexed) as the query, the page as its answer.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lookup_knowledge.adapters.corpus import read_corpus
from lookup_knowledge.adapters.embedder import Embedder, SentenceTransformerEmbedder

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SCIFACT_CATEGORY = "science"
SCIFACT_DOCUMENTS = 1500
PLACEHOLDER_DESCRIPTION = "A short description of this page."  # the showcase template's, on 16 pages


class CachedEmbedder(Embedder):
    """An embedder whose document vectors persist on disk, keyed by model and text."""

    def __init__(self, inner: SentenceTransformerEmbedder, folder: Path) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.folder = folder / hashlib.sha256(inner.model_name.encode()).hexdigest()[:12]
        self.folder.mkdir(parents=True, exist_ok=True)
        self._vectors: dict[str, np.ndarray] = {}
        for part in sorted(self.folder.glob("part-*.npz")):
            with np.load(part) as saved:
                self._vectors.update(zip(saved["keys"].tolist(), saved["vectors"], strict=True))

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        keys = [_key(text) for text in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._vectors))
        if missing:
            text_of = dict(zip(keys, texts, strict=True))
            vectors = self.inner.embed_documents([text_of[k] for k in missing])
            self._vectors.update(zip(missing, vectors, strict=True))
            part = self.folder / f"part-{len(list(self.folder.glob('part-*.npz'))):05d}.npz"
            np.savez(part, keys=np.array(missing), vectors=vectors)
        if not keys:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self._vectors[k] for k in keys])

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_queries(texts)


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def classic_scifact_mix(cache: Path) -> Path:
    """classic-dev + SciFact (category ``science``) as one BEIR folder under ``cache``."""
    folder = cache / "mix-classic-scifact"
    if (folder / "qrels.tsv").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    classic, scifact = DATA / "classic-dev", DATA / "scifact"
    qrels = [line.split("\t") for line in (scifact / "qrels.tsv").read_text().splitlines()[1:]]
    judged = {row[0] for row in qrels}
    abstracts = [json.loads(line) for line in (scifact / "corpus.jsonl").read_text().splitlines()]
    relevant = {row[1] for row in qrels}
    others = [record["_id"] for record in abstracts if record["_id"] not in relevant]
    kept = relevant | set(random.Random(0).sample(others, SCIFACT_DOCUMENTS - len(relevant)))
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as out:
        out.write((classic / "corpus.jsonl").read_text(encoding="utf-8").rstrip("\n") + "\n")
        for record in abstracts:
            if record["_id"] in kept:
                record = {**record, "category": SCIFACT_CATEGORY, "source": "scifact"}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as out:
        out.write((classic / "queries.jsonl").read_text(encoding="utf-8").rstrip("\n") + "\n")
        for line in (scifact / "queries.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["_id"] in judged:
                record = {**record, "_id": f"sci-{record['_id']}", "category": SCIFACT_CATEGORY}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
    rows = (classic / "qrels.tsv").read_text().splitlines()
    rows += [f"sci-{row}" for row in (scifact / "qrels.tsv").read_text().splitlines()[1:]]
    (folder / "qrels.tsv").write_text("\n".join(rows) + "\n")
    return folder


def hugo_described_pages(cache: Path) -> Path:
    """hugo-docs queries as a BEIR folder under ``cache`` (``queries.jsonl`` with each query's
    ``category``, ``qrels.tsv``); the documents stay the markdown pages of ``DATA / "hugo-docs"``."""
    folder = cache / "hugo-docs-described"
    if (folder / "qrels.tsv").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    pages = [
        doc
        for doc in read_corpus(DATA / "hugo-docs").documents
        if doc.description and doc.description != PLACEHOLDER_DESCRIPTION and len(doc.categories) == 1
    ]
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as out:
        for number, page in enumerate(pages):
            record = {"_id": f"hugo-{number}", "text": page.description, "category": page.categories[0]}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    rows = ["query-id\tcorpus-id\tscore"] + [f"hugo-{n}\t{page.doc_id}\t1" for n, page in enumerate(pages)]
    (folder / "qrels.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


PACKAGE_README_CHARS = 2000  # a package description shorter than this is a stub, not a docs page


def package_readmes(cache: Path) -> tuple[Path, Path]:
    """A second docs site nobody here wrote, for checking choices made on hugo-docs: the
    markdown long descriptions (READMEs) of the Python packages installed in this environment,
    one page each, and their one-line ``Summary`` as the page's question (its frontmatter
    ``description``, not indexed, as on hugo-docs). Returns the pages' folder and the BEIR
    folder of questions and judgments. Which packages are installed decides the set: compare
    runs of one environment."""
    from importlib.metadata import distributions

    pages, questions = cache / "package-readmes", cache / "package-readmes-described"
    if (questions / "qrels.tsv").is_file():
        return pages, questions
    pages.mkdir(parents=True, exist_ok=True)
    questions.mkdir(parents=True, exist_ok=True)
    found: dict[str, tuple[str, str]] = {}
    for dist in distributions():
        meta = dist.metadata
        body, summary = meta.get_payload() or meta.get("Description") or "", meta.get("Summary") or ""
        markdown = "markdown" in (meta.get("Description-Content-Type") or "")
        if markdown and len(body) >= PACKAGE_README_CHARS and len(summary.split()) >= 3:
            found.setdefault(meta["Name"].lower(), (summary.strip(), body))
    rows, records = ["query-id\tcorpus-id\tscore"], []
    for number, (name, (summary, body)) in enumerate(sorted(found.items())):
        header = json.dumps({"title": name, "description": summary}, ensure_ascii=False)
        (pages / f"{name}.md").write_text(f"---\n{header}\n---\n{body}", encoding="utf-8")
        records.append(json.dumps({"_id": f"pkg-{number}", "text": summary}, ensure_ascii=False))
        rows.append(f"pkg-{number}\t{name}.md\t1")
    (questions / "queries.jsonl").write_text("\n".join(records) + "\n", encoding="utf-8")
    (questions / "qrels.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return pages, questions
