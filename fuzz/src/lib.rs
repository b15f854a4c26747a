//! Helpers shared by the fuzz targets.

use cachet::route::Endpoint;

/// The generation endpoint a fuzz input's first byte selects, and the rest of the input.
pub fn endpoint_and_rest(data: &[u8]) -> Option<(Endpoint, &[u8])> {
    let (first, rest) = data.split_first()?;
    let endpoint = match first % 4 {
        0 => Endpoint::Messages,
        1 => Endpoint::Chat,
        2 => Endpoint::Responses,
        _ => Endpoint::GenerateContent,
    };
    Some((endpoint, rest))
}
