"""Experiments the chapters run: small functions that compute what a notebook shows.

One module per topic (bottleneck, compression, topk, ledger, ...). Each function returns
plain numbers or small dataclasses; figures live in `milktea.plots`, interactive views in
`milktea.widgets`, both built on these.
"""
