//! `POST /v1/files`: a multipart upload, read as it arrives and answered with the file
//! object its provider answers, the file's size counted from its part (Anthropic
//! `size_bytes`, OpenAI `bytes`), so a client can tell its upload arrived whole. Nothing is
//! kept: the emulator serves no file back.

use http::Request;
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::error::{ApiError, ErrorKind};
use crate::route::Provider;

/// The largest upload the emulator reads: OpenAI's limit, "Individual files can be up to
/// 512 MB" (API reference, `POST /files`), above Anthropic's 500 MB.
const UPLOAD_LIMIT: u64 = 512 * 1000 * 1000;

/// What an upload held.
struct Upload {
    filename: String,
    mime_type: String,
    size: u64,
    purpose: Option<String>,
}

/// The file object `provider` answers an upload with.
pub async fn upload(
    provider: Provider,
    seq: u64,
    now_secs: u64,
    req: Request<Incoming>,
) -> Result<Value, ApiError> {
    let upload = read_upload(req).await?;
    Ok(match provider {
        Provider::Anthropic | Provider::Bedrock | Provider::Vertex => json!({
            "type": "file",
            "id": format!("file_emu{seq:020}"),
            "filename": upload.filename,
            "mime_type": upload.mime_type,
            "size_bytes": upload.size,
            "created_at": jiff::Timestamp::from_second(now_secs as i64)
                .map(|t| t.to_string())
                .unwrap_or_default(),
            "downloadable": false,
        }),
        Provider::OpenAi | Provider::Gemini => json!({
            "object": "file",
            "id": format!("file-emu{seq:020}"),
            "bytes": upload.size,
            "created_at": now_secs,
            "filename": upload.filename,
            "purpose": upload.purpose.unwrap_or_else(|| "user_data".into()),
            "status": "processed",
            "expires_at": null,
        }),
    })
}

async fn read_upload(req: Request<Incoming>) -> Result<Upload, ApiError> {
    let content_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| ApiError::invalid("an upload must be multipart/form-data with a boundary"))?;
    let constraints =
        multer::Constraints::new().size_limit(multer::SizeLimit::new().whole_stream(UPLOAD_LIMIT));
    let stream = http_body_util::BodyDataStream::new(req.into_body());
    let mut form = multer::Multipart::with_constraints(stream, boundary, constraints);
    let mut file = None;
    let mut purpose = None;
    while let Some(mut field) = form.next_field().await.map_err(unreadable)? {
        match (field.file_name().map(str::to_string), field.name()) {
            (Some(filename), _) => {
                let mime_type = field
                    .content_type()
                    .map_or("application/octet-stream".into(), ToString::to_string);
                let mut size = 0u64;
                while let Some(chunk) = field.chunk().await.map_err(unreadable)? {
                    size += chunk.len() as u64;
                }
                file = Some((filename, mime_type, size));
            }
            (None, Some("purpose")) => purpose = Some(field.text().await.map_err(unreadable)?),
            (None, _) => drop(field.bytes().await.map_err(unreadable)?),
        }
    }
    let Some((filename, mime_type, size)) = file else {
        return Err(ApiError::invalid("the upload holds no file part"));
    };
    Ok(Upload {
        filename,
        mime_type,
        size,
        purpose,
    })
}

fn unreadable(e: multer::Error) -> ApiError {
    match e {
        multer::Error::StreamSizeExceeded { .. } => ApiError::new(
            ErrorKind::TooLarge,
            format!("an upload may hold at most {UPLOAD_LIMIT} bytes"),
        ),
        e => ApiError::invalid(format!("could not read the upload: {e}")),
    }
}
