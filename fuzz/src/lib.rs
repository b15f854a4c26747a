//! Helpers shared by the fuzz targets.

use cachet::route::Endpoint;

/// The generation endpoint a fuzz input's first byte selects, and the rest of the input.
pub fn endpoint_and_rest(data: &[u8]) -> Option<(Endpoint, &[u8])> {
    let (first, rest) = data.split_first()?;
    let endpoint = match first % 3 {
        0 => Endpoint::Messages,
        1 => Endpoint::Chat,
        _ => Endpoint::Responses,
    };
    Some((endpoint, rest))
}

/// The provider of a generation endpoint.
pub fn provider_of(endpoint: Endpoint) -> cachet::route::Provider {
    match endpoint {
        Endpoint::Messages | Endpoint::CountTokens => cachet::route::Provider::Anthropic,
        _ => cachet::route::Provider::OpenAi,
    }
}
