//! The guard of `cachet replay`: per arm, the requests where the arm cost more than the
//! client alone (the requests as recorded), so a policy author sees where a policy loses,
//! not only whether its total is lower.

use std::collections::HashMap;
use std::fmt::Write;

use serde::Serialize;

use super::run::ArmStats;
use crate::trace::record::Record;

/// Requests shown per arm in the table's guard lines (the JSON lists them all).
const SHOWN: usize = 5;
/// Differences below this are rounding, not a loss (USD).
const EPSILON_USD: f64 = 1e-9;

/// An arm and the requests where it cost more than the client alone.
pub type ArmLosses<'a> = (&'a ArmStats, Vec<Loss>);

/// One request that cost an arm more than the client alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Loss {
    /// The request's number in the replay (1-based, generation requests in time order);
    /// `None` for the keep-warms after the sessions' last requests.
    pub request: Option<usize>,
    pub session: Option<String>,
    /// What the arm paid for it (keep-warms sent just before it included).
    pub cost_usd: f64,
    /// What the client paid for it, as recorded.
    pub client_cost_usd: f64,
}

impl Loss {
    pub fn extra_usd(&self) -> f64 {
        self.cost_usd - self.client_cost_usd
    }
}

/// The requests where `arm` cost more than `client` (the same records replayed as
/// recorded), in replay order.
pub fn losses(arm: &ArmStats, client: &ArmStats, records: &[Record]) -> Vec<Loss> {
    let number: HashMap<usize, usize> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.endpoint().is_generation())
        .enumerate()
        .map(|(n, (i, _))| (i, n + 1))
        .collect();
    let theirs: HashMap<usize, f64> = client.per_request_cost.iter().copied().collect();
    let mut out: Vec<Loss> = arm
        .per_request_cost
        .iter()
        .filter_map(|&(i, cost)| {
            let client_cost = theirs.get(&i).copied().unwrap_or(0.0);
            (cost > client_cost + EPSILON_USD).then(|| Loss {
                request: number.get(&i).copied(),
                session: records.get(i).map(|r| r.session.clone()),
                cost_usd: cost,
                client_cost_usd: client_cost,
            })
        })
        .collect();
    if arm.trailing_keep_warm_cost > client.trailing_keep_warm_cost + EPSILON_USD {
        out.push(Loss {
            request: None,
            session: None,
            cost_usd: arm.trailing_keep_warm_cost,
            client_cost_usd: client.trailing_keep_warm_cost,
        });
    }
    out
}

/// The lines under the table: for each arm that shapes requests, how many cost more than
/// the client alone, by how much in all, and the worst of them.
pub fn lines(arms: &[ArmLosses<'_>], client: &str) -> String {
    let mut out = format!("\nrequests that cost more than the client alone ({client}):\n");
    let width = arms.iter().map(|(a, _)| a.arm.len()).max().unwrap_or(0);
    for (arm, losses) in arms {
        let _ = write!(out, "  {:width$}  ", arm.arm);
        if losses.is_empty() {
            out.push_str("none\n");
            continue;
        }
        let extra: f64 = losses.iter().map(Loss::extra_usd).sum();
        let _ = write!(
            out,
            "{} of {}, +{} in all:",
            losses.len(),
            arm.requests,
            usd(extra)
        );
        let mut worst: Vec<&Loss> = losses.iter().collect();
        worst.sort_by(|a, b| b.extra_usd().total_cmp(&a.extra_usd()));
        for (i, loss) in worst.iter().take(SHOWN).enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            match loss.request {
                Some(n) => {
                    let _ = write!(out, "{sep}#{n} +{}", usd(loss.extra_usd()));
                }
                None => {
                    let _ = write!(out, "{sep}keep-warms at the end +{}", usd(loss.extra_usd()));
                }
            }
        }
        if worst.len() > SHOWN {
            let _ = write!(out, ", {} more", worst.len() - SHOWN);
        }
        out.push('\n');
    }
    out
}

/// Dollars to the hundredth of a cent, and finer for smaller amounts (a loss is never
/// shown as zero).
fn usd(x: f64) -> String {
    if x >= 0.0001 {
        format!("${x:.4}")
    } else {
        format!("${x:.6}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(name: &str, costs: &[f64]) -> ArmStats {
        ArmStats {
            arm: name.into(),
            requests: costs.len() as u64,
            per_request_cost: costs.iter().copied().enumerate().collect(),
            ..Default::default()
        }
    }

    fn records(n: usize) -> Vec<Record> {
        (0..n)
            .map(|i| {
                serde_json::from_value(serde_json::json!({"v": 1, "time": i, "session": "s",
                    "provider": "anthropic", "endpoint": "messages", "path": "/v1/messages",
                    "body": {}}))
                .unwrap()
            })
            .collect()
    }

    #[test]
    fn only_the_requests_that_cost_more_are_listed_worst_first() {
        let client = stats("client", &[0.01, 0.02, 0.03, 0.04]);
        let arm = stats("auto", &[0.01, 0.025, 0.02, 0.05]);
        let found = losses(&arm, &client, &records(4));
        let numbers: Vec<Option<usize>> = found.iter().map(|l| l.request).collect();
        assert_eq!(numbers, [Some(2), Some(4)]);
        let text = lines(&[(&arm, found)], "arm `client`");
        assert!(
            text.contains("auto  2 of 4, +$0.0150 in all: #4 +$0.0100, #2 +$0.0050"),
            "{text}"
        );
        assert!(losses(&client, &client, &records(4)).is_empty());
        assert!(lines(&[(&client, vec![])], "x").contains("client  none"));
    }

    #[test]
    fn keep_warms_after_the_last_request_are_a_loss_of_their_own() {
        let client = stats("client", &[0.01]);
        let mut arm = stats("warm", &[0.01]);
        arm.trailing_keep_warm_cost = 0.002;
        let found = losses(&arm, &client, &records(1));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].request, None);
    }
}
