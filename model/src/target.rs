//! Where an instance's terminals run.

/// Where an instance's terminals run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The broker's own host (development).
    Local,
    /// A running container on the broker's Docker engine.
    Docker { container: String },
}

impl Target {
    pub fn needs_docker(&self) -> bool {
        matches!(self, Target::Docker { .. })
    }

    /// The contract's name of the kind: `local` or `docker`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Target::Local => "local",
            Target::Docker { .. } => "docker",
        }
    }
}
