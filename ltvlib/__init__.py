"""ltvlib: train, extract, inject and analyse task vectors in decoder language models.

The companion library of *ltv-book*, an executable reproduction of Yang, Cho, Ding and Inoue,
"Task Vectors, Learned Not Extracted: Performance Gains and Mechanistic Insights" (ICLR 2026).

Importing the package reads nothing from the network or the environment; heavy submodules are imported
where they are used.
"""

__version__ = "0.1.0"
