"""Languages of scenarios and conversations (issue 47): BCP-47 tags, checked, and their names.

A scenario (and its persona) says the language its conversation is in (``language: es-MX``);
the engine tells the persona model to write in it, rule sets (events, role breaks, realism) say
which languages they are written for, and a rule-based judge without rules for a language
refuses it in one line instead of judging Spanish with English rules.
"""

from __future__ import annotations

import re

DEFAULT_LANGUAGE = "en"
# ISO 639-1 codes of languages a teen-safety study is likely to run in, with their English names
# (what prompts say). A tag whose primary subtag is not here is refused: a typo ("sp" for
# Spanish) must not pass as a language nothing knows.
LANGUAGE_NAMES: dict[str, str] = {
    "ar": "Arabic", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech",
    "cy": "Welsh", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish",
    "fil": "Filipino", "fr": "French", "ga": "Irish", "gl": "Galician", "gu": "Gujarati",
    "ha": "Hausa", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian", "hu": "Hungarian",
    "id": "Indonesian", "ig": "Igbo", "is": "Icelandic", "it": "Italian", "ja": "Japanese",
    "kn": "Kannada", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "ml": "Malayalam",
    "mr": "Marathi", "ms": "Malay", "mt": "Maltese", "nb": "Norwegian Bokmål", "nl": "Dutch",
    "nn": "Norwegian Nynorsk", "no": "Norwegian", "pa": "Punjabi", "pl": "Polish",
    "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian",
    "sq": "Albanian", "sr": "Serbian", "sv": "Swedish", "sw": "Swahili", "ta": "Tamil",
    "te": "Telugu", "th": "Thai", "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian",
    "ur": "Urdu", "vi": "Vietnamese", "yo": "Yoruba", "zh": "Chinese", "zu": "Zulu",
}  # fmt: skip
_TAG = re.compile(r"^[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8})*$")


def primary_language(tag: str | None) -> str:
    """The primary subtag, lower case ("es-MX" -> "es"; none: English)."""
    return (tag or DEFAULT_LANGUAGE).split("-")[0].strip().lower() or DEFAULT_LANGUAGE


def language_problem(tag: str) -> str | None:
    """Why ``tag`` is not a language tag this project knows, or None."""
    if not _TAG.match(tag or ""):
        return f"{tag!r} is not a BCP-47 language tag (expected e.g. en, es, es-MX, fr, pt-BR)"
    if primary_language(tag) not in LANGUAGE_NAMES:
        return (
            f"unknown language {primary_language(tag)!r} in {tag!r} (expected an ISO 639-1 code "
            "such as en, es, fr, de, pt)"
        )
    return None


def language_name(tag: str | None) -> str:
    """The English name of ``tag``'s language ("es-MX" -> "Spanish")."""
    return LANGUAGE_NAMES.get(primary_language(tag), primary_language(tag))
