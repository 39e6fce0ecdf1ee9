"""Random-graph differential testing of NNAPI drivers: a generator of valid random models
(:mod:`fuzz.graphs`, :mod:`fuzz.families`), hypothesis strategies (:mod:`fuzz.strategies`) and
the comparison and shrinking the random-graph suite uses (:mod:`fuzz.differential`)."""
