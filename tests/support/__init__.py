"""Helpers the whole test suite shares: random NeMo models, NeMo as a peer, a local S3 server, a hostile corpus."""
