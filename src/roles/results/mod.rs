//! The results channel: consumes the results topic ([`consumer`]) and
//! produces the dead-letter records owed by jobs that died
//! ([`dead_letters`]). Reports are applied by the [`Resolver`], like those
//! of every other channel.

mod consumer;
mod dead_letters;

pub use consumer::{
    ResultsConsumer, ResultsConsumerConfig, ResultsReport, RESULTS_SESSION_TIMEOUT_MS,
};
pub use dead_letters::{
    DeadLetterConfig, DeadLetterError, DeadLetterProducer, DeadLettersReport, HEADER_ERROR,
    HEADER_TOPIC,
};

#[cfg(doc)]
use crate::roles::resolver::Resolver;
