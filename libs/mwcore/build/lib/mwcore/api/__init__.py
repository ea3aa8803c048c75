"""What a computation's author writes against: computations, context, records, ids, state codecs."""
