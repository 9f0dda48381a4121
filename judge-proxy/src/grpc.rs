//! gRPC `Judge` and gRPC health (`grpc.health.v1`), and the one place where
//! wire types become domain types: bad wire input is `InvalidArgument`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cohort_core::scoring::{UnjudgedReason, Verdict};
use cohort_proto::convert::class_to_pb;
use cohort_proto::v1 as pb;
use cohort_proto::v1::judge_server::{Judge, JudgeServer};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};
use tracing::Instrument as _;

use crate::Proxy;
use crate::error::ProxyError;
use crate::judge::{CallRecord, JudgeClaim, JudgeInput, JudgeOutput, Snippet};
use crate::upstream::Attempt;

/// The most claims one request may carry.
pub const MAX_CLAIMS_PER_REQUEST: usize = 10_000;

/// The `Judge` service.
#[derive(Debug, Clone)]
pub struct JudgeService {
    proxy: Arc<Proxy>,
}

impl JudgeService {
    pub fn new(proxy: Arc<Proxy>) -> JudgeService {
        JudgeService { proxy }
    }
}

/// Serves `Judge` and health on `listener` until `shutdown`.
pub async fn serve(
    proxy: Arc<Proxy>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ProxyError> {
    let limit = proxy.config().max_request_bytes;
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<JudgeServer<JudgeService>>().await;
    let judge = JudgeServer::new(JudgeService::new(proxy)).max_decoding_message_size(limit);
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(judge)
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY small replies wait for the peer's delayed ACK.
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
        .map_err(|e| ProxyError::Io(format!("the gRPC server failed: {e}")))
}

#[tonic::async_trait]
impl Judge for JudgeService {
    async fn judge_claims(&self, request: Request<pb::JudgeRequest>) -> Result<Response<pb::JudgeResponse>, Status> {
        let span = tracing::info_span!(
            "judge",
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = "cohort.v1.Judge",
            rpc.method = "JudgeClaims",
        );
        cohort_telemetry::propagation::set_parent_from_metadata(&span, request.metadata());
        let authorization = request.metadata().get("authorization").and_then(|v| v.to_str().ok());
        let team = self.proxy.authenticate(authorization).map_err(|e| e.to_status())?.name.clone();
        let request = request.into_inner();
        let deadline_ms = request.deadline_ms;
        let input = judge_input(request).map_err(|e| e.to_status())?;
        let deadline = self.proxy.deadline(Some(Duration::from_millis(u64::from(deadline_ms))));
        let out = self.proxy.judge(&team, input, deadline).instrument(span).await.map_err(|e| e.to_status())?;
        // Nothing reached the upstream because the team's share stayed in
        // use until the deadline: say so as an error the caller can retry,
        // not as a page of unjudged verdicts.
        if out.attempts.is_empty()
            && let Some(e) = &out.permit_deadline
        {
            return Err(e.to_status());
        }
        Ok(Response::new(judge_response(out)))
    }

    async fn describe_judge(
        &self,
        request: Request<pb::DescribeJudgeRequest>,
    ) -> Result<Response<pb::DescribeJudgeResponse>, Status> {
        // Authenticated like JudgeClaims: a caller checks its key with it.
        let authorization = request.metadata().get("authorization").and_then(|v| v.to_str().ok());
        self.proxy.authenticate(authorization).map_err(|e| e.to_status())?;
        let name = request.into_inner().judge;
        if name.trim().is_empty() {
            return Err(ProxyError::InvalidRequest("`judge` must name a configured judge".into()).to_status());
        }
        let config = self.proxy.config();
        let judge = config
            .judge(&name)
            .ok_or_else(|| ProxyError::NotFound(format!("no judge is named \"{name}\"")).to_status())?;
        let kind = config.upstream(&judge.upstream).map_or("unknown", |u| u.kind.as_str());
        Ok(Response::new(pb::DescribeJudgeResponse {
            judge: judge.name.clone(),
            requested_model: judge.model.clone(),
            pinned_served_model: judge.served_model.clone(),
            upstream_kind: kind.to_owned(),
            vendor_lineage: judge.vendor_lineage.clone().unwrap_or_default(),
            simulated: config.judge_is_simulated(judge),
            strict: config.strict,
            batch_size: judge.batch_size,
        }))
    }
}

/// A wire request as a domain [`JudgeInput`]; anything wrong is
/// [`ProxyError::InvalidRequest`].
pub fn judge_input(request: pb::JudgeRequest) -> Result<JudgeInput, ProxyError> {
    if request.judge.trim().is_empty() {
        return Err(ProxyError::InvalidRequest("`judge` must name a configured judge".into()));
    }
    if request.claims.is_empty() {
        return Err(ProxyError::InvalidRequest("`claims` is empty: send at least one claim".into()));
    }
    if request.claims.len() > MAX_CLAIMS_PER_REQUEST {
        return Err(ProxyError::InvalidRequest(format!(
            "{} claims in one request; send at most {MAX_CLAIMS_PER_REQUEST}",
            request.claims.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    let mut claims = Vec::with_capacity(request.claims.len());
    for (i, c) in request.claims.into_iter().enumerate() {
        if c.claim_id.is_empty() {
            return Err(ProxyError::InvalidRequest(format!("claims[{i}].claim_id is empty")));
        }
        if !seen.insert(c.claim_id.clone()) {
            return Err(ProxyError::InvalidRequest(format!("claims[{i}].claim_id \"{}\" is repeated", c.claim_id)));
        }
        if c.text.trim().is_empty() {
            return Err(ProxyError::InvalidRequest(format!("claims[{i}].text is empty")));
        }
        let snippets = c
            .snippets
            .into_iter()
            .map(|s| Snippet { index: s.index, source_url: s.source_url, text: s.text })
            .collect();
        claims.push(JudgeClaim { claim_id: c.claim_id, text: c.text, snippets, cited_indices: c.cited_indices });
    }
    Ok(JudgeInput { judge: request.judge, claims, query_id: request.query_id, system: request.system })
}

/// A domain [`JudgeOutput`] as a wire response.
pub fn judge_response(out: JudgeOutput) -> pb::JudgeResponse {
    let verdicts = out
        .verdicts
        .into_iter()
        .map(|v| {
            let (verdict, reason) = match v.verdict {
                Verdict::Yes => (pb::Verdict::Yes, pb::UnjudgedReason::Unspecified),
                Verdict::No => (pb::Verdict::No, pb::UnjudgedReason::Unspecified),
                Verdict::Unjudged(r) => (pb::Verdict::Unjudged, unjudged_reason(r)),
            };
            pb::ClaimVerdict {
                claim_id: v.claim_id,
                verdict: verdict.into(),
                unjudged_reason: reason.into(),
                reasoning: v.reasoning,
                served_model: v.served_model,
                trace_record_json: v.trace.and_then(|t| serde_json::to_string(&t).ok()).unwrap_or_default(),
            }
        })
        .collect();
    pb::JudgeResponse {
        verdicts,
        requested_model: out.requested_model,
        served_models: out.served_models,
        usage: Some(pb::Usage {
            input_tokens: out.usage.input_tokens,
            output_tokens: out.usage.output_tokens,
            cost_micros: out.usage.cost_micros,
            currency: out.usage.currency,
        }),
        attempts: out.attempts.iter().map(attempt).collect(),
        simulated: out.simulated,
        calls: out.calls.into_iter().map(call).collect(),
    }
}

fn call(c: CallRecord) -> pb::JudgeCall {
    pb::JudgeCall {
        claim_ids: c.claim_ids,
        messages: c.messages.into_iter().map(|m| pb::JudgeMessage { role: m.role, content: m.content }).collect(),
        replied: c.raw_reply.is_some(),
        raw_reply: c.raw_reply.unwrap_or_default(),
        requested_model: c.requested_model,
        served_model: c.served_model.unwrap_or_default(),
        attempts: c.attempts,
        started_at: c.started_at,
        latency_ms: u32::try_from(c.latency.as_millis()).unwrap_or(u32::MAX),
        outcome: c.outcome,
        simulated: c.simulated,
    }
}

fn unjudged_reason(r: UnjudgedReason) -> pb::UnjudgedReason {
    match r {
        UnjudgedReason::PartialReply => pb::UnjudgedReason::PartialReply,
        UnjudgedReason::Unparseable => pb::UnjudgedReason::Unparseable,
        UnjudgedReason::ModelMismatch => pb::UnjudgedReason::ModelMismatch,
        UnjudgedReason::ProviderError => pb::UnjudgedReason::ProviderError,
        UnjudgedReason::SourceUnavailable => pb::UnjudgedReason::SourceUnavailable,
        UnjudgedReason::Deadline => pb::UnjudgedReason::Deadline,
        UnjudgedReason::NoMajority => pb::UnjudgedReason::NoMajority,
    }
}

fn attempt(a: &Attempt) -> pb::JudgeAttempt {
    let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
    pb::JudgeAttempt {
        class: class_to_pb(a.class).into(),
        http_status: a.http_status.map_or(0, u32::from),
        requested_model: a.requested_model.clone(),
        served_model: a.served_model.clone().unwrap_or_default(),
        detail: a.detail.clone(),
        latency_ms: ms(a.latency),
        served_provider: a.served_provider.clone().unwrap_or_default(),
        permit_wait_ms: ms(a.permit_wait),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(id: &str) -> pb::Claim {
        pb::Claim { claim_id: id.into(), text: "t".into(), ..Default::default() }
    }

    #[test]
    fn bad_wire_input_is_invalid_argument() {
        let ok = pb::JudgeRequest { judge: "j".into(), claims: vec![claim("a")], ..Default::default() };
        assert!(judge_input(ok.clone()).is_ok());
        for bad in [
            pb::JudgeRequest { judge: String::new(), ..ok.clone() },
            pb::JudgeRequest { claims: vec![], ..ok.clone() },
            pb::JudgeRequest { claims: vec![claim("a"), claim("a")], ..ok.clone() },
            pb::JudgeRequest { claims: vec![claim("")], ..ok.clone() },
        ] {
            let e = judge_input(bad).unwrap_err();
            assert_eq!(e.grpc_code(), tonic::Code::InvalidArgument, "{e}");
        }
    }
}
