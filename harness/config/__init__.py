"""What a composed config means: a run's identity and hash (`identity`), the checks that end a
bad config in one line (`validate`) and the OmegaConf resolvers the configs use (`resolvers`,
registered when harness is imported)."""
