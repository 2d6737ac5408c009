"""Training data and losses: documents packed into rows, role-tagged next-token losses."""

from __future__ import annotations

from typing import Iterator

from vsearcher_lite.model.tokenizer import DOC_SEPARATOR, PAD_TOKEN, token_id
from vsearcher_lite.recipes.pretraining.corpus import COPY_ROLES, ROLE_IDS, Doc


def encode_doc(tokenizer, doc: Doc) -> tuple[list[int], list[int]]:
    """Token ids of a document and each token's role id (segments tokenized one by one)."""
    ids: list[int] = []
    roles: list[int] = []
    for text, role in doc.segments:
        if not text:
            continue
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids.extend(piece)
        roles.extend([ROLE_IDS[role]] * len(piece))
    return ids, roles


class Packer:
    """Packs documents into rows of ``seq_len`` tokens, whole documents only (a copy document
    cut in half would teach nothing) except pages, which may be cut to fill a row's end."""

    def __init__(self, tokenizer, docs: Iterator[Doc]):
        self.tokenizer = tokenizer
        self.docs = docs
        self.sep = token_id(tokenizer, DOC_SEPARATOR)
        self.pad = token_id(tokenizer, PAD_TOKEN)
        self.pending: tuple[str, list[int], list[int]] | None = None
        self.skipped = 0

    def _next(self) -> tuple[str, list[int], list[int]]:
        if self.pending is not None:
            item, self.pending = self.pending, None
            return item
        doc = next(self.docs)
        ids, roles = encode_doc(self.tokenizer, doc)
        return doc.kind, ids + [self.sep], roles + [0]

    def row(self, seq_len: int) -> tuple[list[int], list[int], list[int]]:
        """``(ids, roles, mask)`` of one row; ``mask`` is 0 on padding."""
        ids: list[int] = []
        roles: list[int] = []
        while len(ids) < seq_len:
            kind, d_ids, d_roles = self._next()
            room = seq_len - len(ids)
            if len(d_ids) <= room:
                ids += d_ids
                roles += d_roles
            elif kind == "page" and (room >= 32 or not ids):
                ids += d_ids[:room]
                roles += d_roles[:room]
            elif kind == "page":  # too little room left: the page starts the next row
                self.pending = (kind, d_ids, d_roles)
                break
            elif len(d_ids) > seq_len:
                self.skipped += 1
            else:
                self.pending = (kind, d_ids, d_roles)
                break
        n, pad = len(ids), seq_len - len(ids)
        return ids + [self.pad] * pad, roles + [0] * pad, [1] * n + [0] * pad

    def batch(self, batch_size: int, seq_len: int):
        import torch

        rows = [self.row(seq_len) for _ in range(batch_size)]
        return tuple(torch.tensor([r[k] for r in rows], dtype=torch.long) for k in range(3))


def token_losses(logits, ids, mask):
    """Per-position next-token losses ``[B, T-1]`` and the matching validity mask."""
    import torch.nn.functional as F

    targets = ids[:, 1:]
    valid = mask[:, 1:].bool()
    flat = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    losses = F.cross_entropy(flat, targets.reshape(-1), reduction="none").view_as(targets)
    return losses, valid


def weighted_mean(losses, valid, roles, copy_weight: float = 1.0):
    """The mean next-token loss over valid targets, copy targets weighing ``copy_weight``.

    >>> import torch
    >>> l, v = torch.tensor([[1.0, 3.0]]), torch.tensor([[True, True]])
    >>> r = torch.tensor([[0, 0, 1]])
    >>> float(weighted_mean(l, v, r)), float(weighted_mean(l, v, r, 3.0))
    (2.0, 2.5)
    """
    if copy_weight == 1.0:
        return losses[valid].mean()
    w = valid.float() * (1.0 + (copy_weight - 1.0) * (roles[:, 1:] > 0).float())
    return (losses * w).sum() / w.sum().clamp(min=1.0)


def role_means(losses, valid, roles) -> dict[str, float | None]:
    """Mean loss over all valid targets and over the targets of each copy role (None if absent)."""
    out: dict[str, float | None] = {"loss": float(losses[valid].mean()) if valid.any() else None}
    target_roles = roles[:, 1:]
    for role in COPY_ROLES:
        sel = valid & (target_roles == ROLE_IDS[role])
        out[f"loss_{role}"] = float(losses[sel].mean()) if sel.any() else None
    return out
