//! The stand-in for a store that could not be opened (in `fail-open` mode): every call
//! fails as unavailable, so each request counts and logs the failure and `/readyz` says why.

use futures_util::future::BoxFuture;

use super::{
    Appended, Blob, Retention, SessionStore, SessionSummary, StoreError, StoreHealth, StoreResult,
    StoreStats, SweepReport,
};
use crate::providers::cache_key::MessageKey;
use crate::session::entry::Entry;

pub struct Unavailable {
    reason: String,
}

impl Unavailable {
    pub fn new(reason: String) -> Unavailable {
        Unavailable { reason }
    }

    fn fail<'a, T: Send + 'a>(&self) -> BoxFuture<'a, StoreResult<T>> {
        let err = StoreError::Unavailable(format!("not opened at start ({})", self.reason));
        Box::pin(async move { Err(err) })
    }
}

impl SessionStore for Unavailable {
    fn append<'a>(&'a self, _: &'a str, _: &'a [Entry]) -> BoxFuture<'a, StoreResult<Option<u64>>> {
        self.fail()
    }

    fn append_once<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<Appended>> {
        self.fail()
    }

    fn record<'a>(
        &'a self,
        _: &'a str,
        _: &'a Entry,
        _: Vec<Blob>,
    ) -> BoxFuture<'a, StoreResult<u64>> {
        self.fail()
    }

    fn entry_count<'a>(&'a self, _: &'a str) -> BoxFuture<'a, StoreResult<usize>> {
        self.fail()
    }

    fn load_from<'a>(&'a self, _: &'a str, _: usize) -> BoxFuture<'a, StoreResult<Vec<Entry>>> {
        self.fail()
    }

    fn get_blobs<'a>(
        &'a self,
        _: &'a str,
        _: &'a [MessageKey],
    ) -> BoxFuture<'a, StoreResult<Vec<Option<Vec<u8>>>>> {
        self.fail()
    }

    fn next_request_index<'a>(&'a self, _: &'a str) -> BoxFuture<'a, StoreResult<u64>> {
        self.fail()
    }

    fn list_sessions(&self, _: usize) -> BoxFuture<'_, StoreResult<Vec<SessionSummary>>> {
        self.fail()
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        self.fail()
    }

    fn sweep<'a>(&'a self, _: &'a Retention, _: u64) -> BoxFuture<'a, StoreResult<SweepReport>> {
        self.fail()
    }

    fn health(&self) -> BoxFuture<'_, StoreHealth> {
        let health = StoreHealth::failing("unavailable", self.reason.clone());
        Box::pin(async move { health })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
