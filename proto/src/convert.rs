//! Conversions between the core enums (`Outcome`, `AttemptClass`) and
//! their wire forms, shared by every crate that speaks the contracts. An
//! unknown or UNSPECIFIED wire value is an `InvalidArgument`.

use cohort_core::taxonomy::{AttemptClass, Outcome};
use tonic::Status;

use crate::v1 as pb;

pub fn outcome_to_pb(o: Outcome) -> pb::Outcome {
    match o {
        Outcome::Completed => pb::Outcome::Completed,
        Outcome::Refused => pb::Outcome::Refused,
        Outcome::Failed => pb::Outcome::Failed,
        Outcome::TimedOut => pb::Outcome::TimedOut,
        Outcome::Unavailable => pb::Outcome::Unavailable,
        Outcome::NotRun => pb::Outcome::NotRun,
    }
}

pub fn outcome_from_pb(value: i32) -> Result<Outcome, Status> {
    match pb::Outcome::try_from(value) {
        Ok(pb::Outcome::Completed) => Ok(Outcome::Completed),
        Ok(pb::Outcome::Refused) => Ok(Outcome::Refused),
        Ok(pb::Outcome::Failed) => Ok(Outcome::Failed),
        Ok(pb::Outcome::TimedOut) => Ok(Outcome::TimedOut),
        Ok(pb::Outcome::Unavailable) => Ok(Outcome::Unavailable),
        Ok(pb::Outcome::NotRun) => Ok(Outcome::NotRun),
        _ => Err(Status::invalid_argument(format!("outcome {value} is not a final outcome"))),
    }
}

pub fn class_to_pb(c: AttemptClass) -> pb::AttemptClass {
    match c {
        AttemptClass::Ok => pb::AttemptClass::Ok,
        AttemptClass::RateLimited => pb::AttemptClass::RateLimited,
        AttemptClass::QuotaExhausted => pb::AttemptClass::QuotaExhausted,
        AttemptClass::ServerError => pb::AttemptClass::ServerError,
        AttemptClass::EmptyContent => pb::AttemptClass::EmptyContent,
        AttemptClass::Timeout => pb::AttemptClass::Timeout,
        AttemptClass::ConnectionError => pb::AttemptClass::ConnectionError,
        AttemptClass::ClientError => pb::AttemptClass::ClientError,
        AttemptClass::Malformed => pb::AttemptClass::Malformed,
        AttemptClass::Refused => pb::AttemptClass::Refused,
        AttemptClass::WorkerLost => pb::AttemptClass::WorkerLost,
        AttemptClass::AuthError => pb::AttemptClass::AuthError,
    }
}

pub fn class_from_pb(value: i32) -> Result<AttemptClass, Status> {
    let class = match pb::AttemptClass::try_from(value) {
        Ok(pb::AttemptClass::Ok) => AttemptClass::Ok,
        Ok(pb::AttemptClass::RateLimited) => AttemptClass::RateLimited,
        Ok(pb::AttemptClass::QuotaExhausted) => AttemptClass::QuotaExhausted,
        Ok(pb::AttemptClass::ServerError) => AttemptClass::ServerError,
        Ok(pb::AttemptClass::EmptyContent) => AttemptClass::EmptyContent,
        Ok(pb::AttemptClass::Timeout) => AttemptClass::Timeout,
        Ok(pb::AttemptClass::ConnectionError) => AttemptClass::ConnectionError,
        Ok(pb::AttemptClass::ClientError) => AttemptClass::ClientError,
        Ok(pb::AttemptClass::Malformed) => AttemptClass::Malformed,
        Ok(pb::AttemptClass::Refused) => AttemptClass::Refused,
        Ok(pb::AttemptClass::WorkerLost) => AttemptClass::WorkerLost,
        Ok(pb::AttemptClass::AuthError) => AttemptClass::AuthError,
        _ => return Err(Status::invalid_argument(format!("attempt class {value} is not known"))),
    };
    Ok(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_and_class_round_trips() {
        for o in Outcome::ALL {
            assert_eq!(outcome_from_pb(outcome_to_pb(o) as i32).unwrap(), o);
        }
        for c in AttemptClass::ALL {
            assert_eq!(class_from_pb(class_to_pb(c) as i32).unwrap(), c);
        }
        assert!(outcome_from_pb(0).is_err());
        assert!(class_from_pb(99).is_err());
    }
}
