"""A two-tool lookup agent, written as ordinary code against the official `openai` client: it
answers questions about a small corpus (recipes/data/lookup) with `search` (the titles of the best
BM25 matches of a query, from kitchen's cached `SearchIndex`) and `read` (a document by title).
Its model calls know nothing of kitchen: given any OpenAI-compatible `base_url` (a model server,
or the rollouts' endpoint while training) it runs the same way."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from kitchen.integrations.tools import SearchIndex

CORPUS = Path(__file__).resolve().parents[1] / "data" / "lookup" / "corpus.jsonl"

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Titles of the documents that best match the query.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "words to look for"}},
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "The text of the document with this title.",
            "parameters": {
                "type": "object",
                "properties": {"title": {"type": "string", "description": "a title search returned"}},
                "required": ["title"],
            },
        },
    },
]


@dataclass(frozen=True)
class Corpus:
    index: SearchIndex

    @classmethod
    def load(cls, path: Path = CORPUS) -> Corpus:
        return cls(SearchIndex.open(path))

    @property
    def documents(self) -> dict[str, str]:
        return {d.title: d.text for d in self.index.documents}

    def search(self, query: str) -> str:
        return "\n".join(d.title for d in self.index.search(query, 3)) or "No document matches."

    def read(self, title: str) -> str:
        document = self.index.document(title)
        return document.text if document is not None else f"No document titled {title!r}."

    def run(self, name: str, arguments: str) -> str:
        """A tool call's result; a bad call gets an error message, as a tool server would send."""
        try:
            args = json.loads(arguments)
            return self.search(str(args["query"])) if name == "search" else self.read(str(args["title"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            return f"Error: bad arguments for {name}: {arguments}"


async def answer(client: openai.AsyncOpenAI, model: str, question: str, corpus: Corpus, max_calls: int = 4) -> str:
    """Asks the model, runs each tool call it makes, asks again; its first reply without a tool
    call is the answer ("" when `max_calls` run out)."""
    messages: list[Any] = [{"role": "user", "content": question}]
    for _ in range(max_calls):
        reply = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        calls = [c for c in message.tool_calls or [] if isinstance(c, ChatCompletionMessageFunctionToolCall)]
        if not calls:
            return message.content or ""
        messages.append(message.model_dump(include={"role", "content", "tool_calls"}))
        for call in calls:
            result = corpus.run(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return ""
