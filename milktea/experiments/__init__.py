"""Experiments behind the chapters: small functions that compute what a chapter shows."""
