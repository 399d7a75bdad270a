"""Sentences the encoder tests embed: two paraphrases, two unrelated, a short and an empty text."""

TEXTS = [
    "Caroline went to an LGBTQ support group yesterday.",
    "Melanie is painting a sunrise over the lake.",
    "I went to a support group meeting for LGBTQ people last night.",
    "The quarterly tax filing deadline is in April.",
    "ok",
    "",
]
