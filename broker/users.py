"""Users: names, RabbitMQ's salted password hashes, tags.

Theory of operation
-------------------
A password is stored as RabbitMQ stores it (``rabbit_password``):
``base64(salt + H(salt + utf8(password)))`` with a random 4-byte salt, H
named by the user's ``hashing_algorithm``. New hashes use
``rabbit_password_hashing_sha256`` (RabbitMQ's default); ``_sha512`` and
``_md5`` are accepted from imported definitions and verified the same way,
so a definitions file moves between RabbitMQ and Leveret unchanged. An empty
hash is a user without a password: it cannot log in with PLAIN or AMQPLAIN
(only with EXTERNAL, a client certificate), exactly as in RabbitMQ.

Tags are free strings; RabbitMQ's known ones (``administrator``,
``monitoring``, ``policymaker``, ``management``, ``impersonator``) only
matter to the HTTP API and to validated user-id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass, field

SHA256 = "rabbit_password_hashing_sha256"
SHA512 = "rabbit_password_hashing_sha512"
MD5 = "rabbit_password_hashing_md5"
ALGORITHMS = {SHA256: hashlib.sha256, SHA512: hashlib.sha512, MD5: hashlib.md5}
SALT_BYTES = 4  # RabbitMQ's rabbit_password:generate_salt/0


def hash_password(password: str, algorithm: str = SHA256, salt: bytes | None = None) -> str:
    """RabbitMQ's hash of ``password``: base64(salt + H(salt + password))."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = ALGORITHMS[algorithm](salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def check_password(password: str, password_hash: str, algorithm: str = SHA256) -> bool:
    """Does ``password`` match ``password_hash``? An empty hash matches nothing."""
    fn = ALGORITHMS.get(algorithm)
    if not password_hash or fn is None:
        return False
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    salt, expected = raw[:SALT_BYTES], raw[SALT_BYTES:]
    return hmac.compare_digest(fn(salt + password.encode("utf-8")).digest(), expected)


def parse_tags(text: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Tags as rabbitmqctl and definitions give them: a list, or "a,b" / "a b".
    Anything else (a number, a list holding objects) is a ValueError."""
    if isinstance(text, str):
        text = text.replace(",", " ").split()
    if not isinstance(text, (list, tuple)) or not all(isinstance(t, str) for t in text):
        raise ValueError(f"tags must be a string or a list of strings, not {text!r}")
    return tuple(dict.fromkeys(t.strip() for t in text if t.strip()))


@dataclass
class User:
    name: str
    password_hash: str = ""  # "" = no password: PLAIN/AMQPLAIN logins are refused
    hashing_algorithm: str = SHA256
    tags: tuple[str, ...] = ()
    limits: dict[str, int] = field(default_factory=dict)  # max-connections, max-channels

    def check_password(self, password: str) -> bool:
        return check_password(password, self.password_hash, self.hashing_algorithm)

    def set_password(self, password: str | None) -> None:
        self.password_hash = "" if password is None else hash_password(password)
        self.hashing_algorithm = SHA256

    def record(self) -> dict[str, object]:
        """The definitions-format record (what is persisted and exported)."""
        return {"name": self.name, "password_hash": self.password_hash,
                "hashing_algorithm": self.hashing_algorithm, "tags": list(self.tags),
                "limits": dict(self.limits)}

    @classmethod
    def from_record(cls, doc: dict[str, object]) -> User:
        tags = doc.get("tags", ())
        algorithm = str(doc.get("hashing_algorithm") or SHA256)
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unsupported hashing_algorithm {algorithm!r}")
        return cls(str(doc["name"]), str(doc.get("password_hash") or ""), algorithm,
                   parse_tags(tags if isinstance(tags, (str, list, tuple)) else ()),
                   {str(k): int(v) for k, v in dict(doc.get("limits") or {}).items()})  # type: ignore[call-overload]
