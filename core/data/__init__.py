"""Streamed training data for the language models: masked (ALBERT) and causal (Llama-shaped).

- ``errors``     DataError: data that cannot be found, read or used as configured.
- ``corpus``     write_demo_corpus: a deterministic synthetic English-like corpus in jsonl.gz shards.
- ``stdlib_text`` write_stdlib_corpus: real prose from Python's own documentation, held out by module.
- ``shard_files`` deterministic jsonl.gz shards and the corpus.json that marks a corpus complete.
- ``tokenizer``  TextTokenizer, train_tokenizer, load_tokenizer: a local WordPiece vocabulary.
- ``sources``    DataSource: shard URLs (paths, file://, http(s)://), weight, format, text field.
- ``readers``    read_shard: one shard's texts, streamed with `datasets` (jsonl, parquet) or stdlib (text).
- ``stream``     stream_texts: an endless mix of sources, shard order and shuffle buffer per seed.
- ``batches``    mlm_batches, clm_batches: packing into [CLS] ... [SEP] sequences; BERT-style masking
                 for a masked model, next-token labels for a causal one.
- ``server``     ShardServer, ShardServerThread: serve a shard directory over HTTP on 127.0.0.1.
"""

from core.data.batches import clm_batches, mlm_batches
from core.data.corpus import write_demo_corpus
from core.data.errors import DataError
from core.data.server import ShardServer, ShardServerThread
from core.data.sources import DataSource
from core.data.stream import stream_texts
from core.data.tokenizer import TextTokenizer, load_tokenizer, train_tokenizer

__all__ = [
    "DataError",
    "DataSource",
    "ShardServer",
    "ShardServerThread",
    "TextTokenizer",
    "clm_batches",
    "load_tokenizer",
    "mlm_batches",
    "stream_texts",
    "train_tokenizer",
    "write_demo_corpus",
]
