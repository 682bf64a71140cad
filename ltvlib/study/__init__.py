"""What each chapter measures: the profiles (smoke / cpu / paper) and the sizes, layers and tasks they set, the
trained LTVs, extracted vectors and ICL references per profile, and the cached measurements the chapters share.
The only part of the library that reads a profile (with the book runner, which passes it to the chapters)."""
