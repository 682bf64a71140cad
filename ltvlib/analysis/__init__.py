"""What a vector does inside a model: pure functions of a model and vectors (OV circuits, key heads, the
linear map to the last layer, random-vector controls, the comparison with ``peft`` adapters). Nothing here reads
a chapter's plan or the on-disk cache; the cached, chapter-sized measurements built on these are
:mod:`ltvlib.study`."""
