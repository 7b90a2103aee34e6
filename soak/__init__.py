"""`make soak`: a bounded load of quirky and faulty streams through a real proxy process."""
