"""The worker runtime: producers claim jobs, the executor runs them, the completer
writes outcomes in batches, and the notifier wakes producers."""
