"""The review UI: the lookup inspector, the invocation records and eval runs as web pages
(``docs/review.md``). :func:`review_app` builds it; ``serve`` mounts it at ``/`` and
``lookup-knowledge review`` serves it alone on loopback."""

from lookup_knowledge.review.app import TOKEN_COOKIE, request_token, review_app

__all__ = ["TOKEN_COOKIE", "request_token", "review_app"]
