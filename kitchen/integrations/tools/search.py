"""Retrieval as a tool: BM25 (`bm25s`) over any corpus of `{"title": ..., "text": ...}` JSONL
records, built once and cached on disk keyed by the corpus file's SHA-256 (so an edited corpus
gets a new index and an unchanged one is never re-indexed), and offered to a model as a `search`
tool (`search_tool`) or used by hand (`SearchIndex.search`).

The cache is `<corpus dir>/.<corpus name>.bm25s/<hash>/` unless another folder is given (a run
directory, where the corpus's folder is read-only). An index is written to a temporary folder and
renamed into place, so concurrent builders of one corpus never see half an index.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitchen.engine.errors import DataError
from kitchen.integrations.tools.tool import Tool


@dataclass(frozen=True)
class Document:
    title: str
    text: str


def corpus_hash(path: Path) -> str:
    """The SHA-256 of the corpus file's bytes (the index's cache key)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_documents(path: Path) -> list[Document]:
    """The corpus's records; a line that is not a `{"title", "text"}` object is a DataError naming
    the file and line, and so is a repeated title."""
    documents: list[Document] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path} line {number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("title", "text")):
            raise DataError(f'{path} line {number}: a corpus record is {{"title": text, "text": text}}')
        if record["title"] in seen:
            raise DataError(f"{path} line {number}: title {record['title']!r} appears twice")
        seen.add(record["title"])
        documents.append(Document(record["title"], record["text"]))
    if not documents:
        raise DataError(f"{path}: the corpus has no documents")
    return documents


def _tokens(texts: list[str]) -> list[list[str]]:
    import bm25s

    tokens = bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)
    assert isinstance(tokens, list)
    return tokens


class SearchIndex:
    """A corpus and its BM25 index."""

    def __init__(self, documents: list[Document], retriever: Any, folder: Path) -> None:
        self.documents = documents
        self.retriever = retriever
        self.folder = folder
        """Where the index is cached."""
        self._by_title = {d.title: d for d in documents}

    @classmethod
    def open(cls, corpus: str | Path, cache_dir: str | Path | None = None) -> SearchIndex:
        """The index of `corpus`: loaded from the cache when built before for these bytes, else
        built and cached."""
        import bm25s

        path = Path(corpus)
        if not path.is_file():
            raise DataError(f"search corpus {path}: no such file")
        documents = load_documents(path)
        root = Path(cache_dir) if cache_dir is not None else path.parent / f".{path.name}.bm25s"
        folder = root / corpus_hash(path)
        if not (folder / "params.index.json").is_file():
            retriever = bm25s.BM25()
            retriever.index(_tokens([f"{d.title}\n{d.text}" for d in documents]), show_progress=False)
            root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=root, prefix=".building-"))
            retriever.save(str(staging))
            try:
                os.rename(staging, folder)
            except OSError:  # another builder finished first: its index is the same
                shutil.rmtree(staging, ignore_errors=True)
        return cls(documents, bm25s.BM25.load(str(folder)), folder)

    def search(self, query: str, k: int = 3) -> list[Document]:
        """The (at most) `k` documents that best match `query`, best first; none that share no word."""
        tokens = _tokens([query])
        if not tokens[0]:
            return []
        found, scores = self.retriever.retrieve(tokens, k=min(k, len(self.documents)), show_progress=False)
        return [self.documents[int(i)] for i, s in zip(found[0], scores[0], strict=True) if s > 0]

    def document(self, title: str) -> Document | None:
        return self._by_title.get(title.strip())


def search_tool(index: SearchIndex, top_k: int = 3, name: str = "search", timeout_s: float = 10.0) -> Tool:
    """A tool that answers a query with the `top_k` best documents, each as its title then its text."""

    def search(query: str) -> str:
        """Search the documents for the words of a query; returns the best matches, title then text.

        Args:
            query: words to look for
        """
        hits = index.search(query, top_k)
        return "\n\n".join(f"{d.title}\n{d.text}" for d in hits) or "No document matches."

    return Tool.from_function(search, name=name, timeout_s=timeout_s)
