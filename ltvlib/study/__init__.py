"""What each chapter measures: :mod:`ltvlib.study.plans` turns a chapter's ``profile`` and ``recipe`` parameters
into concrete sizes, layers, tasks and seeds (the only module that reads a profile); the other modules take those
values and return the trained LTVs, extracted vectors, ICL references and cached measurements the chapters share."""
