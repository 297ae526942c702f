"""Agents written as ordinary code against the `openai` client, trained by kitchen recipes."""
