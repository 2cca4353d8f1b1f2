"""What a composed config means: a run's identity and hash (`identity`), where the class or
function a `_target_` names lives and how it is built (`targets`: a moved one keeps the name runs
recorded), the device a config names (`devices`), the checks that end a bad config in one line
(`validate`) and the OmegaConf resolvers the configs use (`resolvers`, registered when harness is
imported)."""
