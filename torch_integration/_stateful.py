"""torchdata's ``StatefulDataLoader``, whose state resumes under another ``num_workers``."""

from __future__ import annotations

from typing import Any

try:
    from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataLoader
except ImportError as exc:  # pragma: no cover - exercised only without torchdata
    raise ImportError("datamount.torch.StatefulDataLoader needs torchdata: pip install torchdata") from exc

from datamount.readers.workers import advance_epochs
from datamount.torch import ReaderDataset, reader_states


class StatefulDataLoader(_TorchdataLoader):  # type: ignore[misc]
    """torchdata's ``StatefulDataLoader`` over a :class:`ReaderDataset`, elastic: ``load_state_dict`` takes a state
    saved with any ``num_workers`` (torchdata's own refuses another count), since the reader's state alone says what
    was consumed; and each new pass over the loader reads the next epoch.

    Over any other dataset it is torchdata's loader, unchanged.
    """

    def __iter__(self) -> Any:
        iterator = super().__iter__()
        if isinstance(self.dataset, ReaderDataset) and self.num_workers > 0:
            # The workers took copies at the epoch this pass reads; the next pass is the next epoch.
            advance_epochs(self.dataset.samples)
        return iterator

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not isinstance(self.dataset, ReaderDataset):
            super().load_state_dict(state_dict)
            return
        self.dataset.load_state_dict(reader_states(state_dict))
        super().load_state_dict({})  # a fresh iterator: the dataset's state says where it starts
