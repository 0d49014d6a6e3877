//! The label sets of the metric families (`prometheus-client`'s `EncodeLabelSet`).

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct MemberLabels {
    pub(super) node_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct NamespaceLabels {
    pub(super) namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KeyLabels {
    pub(super) namespace: String,
    pub(super) key: String,
}

/// The longest hold with what an alert on it needs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LongestHoldLabels {
    pub(super) namespace: String,
    pub(super) key: String,
    pub(super) class: String,
    pub(super) fenced: String,
    pub(super) owner: String,
    /// The class's runbook, or else Picket's stuck-lock runbook at `external_url`.
    pub(super) runbook_url: String,
    /// The key's JSON inspection at `external_url` (empty without one).
    pub(super) inspect_url: String,
    /// The key's console page at `external_url` (empty without one).
    pub(super) console_url: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ThresholdLabels {
    pub(super) namespace: String,
    pub(super) class: String,
    pub(super) fenced: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UrlLabels {
    pub(super) url: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RoleLabels {
    pub(super) role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RequestLabels {
    pub(super) method: String,
    pub(super) code: &'static str,
}
