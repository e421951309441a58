from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.batch_answer import BatchAnswer
from ...models.create_batch import CreateBatch
from ...models.error_body import ErrorBody
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    body: CreateBatch,
    traceparent: None | str | Unset = UNSET,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(traceparent, Unset):
        headers["traceparent"] = traceparent



    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/jobs/batch",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> BatchAnswer | ErrorBody | None:
    if response.status_code == 200:
        response_200 = BatchAnswer.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = ErrorBody.from_dict(response.json())



        return response_400

    if response.status_code == 401:
        response_401 = ErrorBody.from_dict(response.json())



        return response_401

    if response.status_code == 403:
        response_403 = ErrorBody.from_dict(response.json())



        return response_403

    if response.status_code == 404:
        response_404 = ErrorBody.from_dict(response.json())



        return response_404

    if response.status_code == 409:
        response_409 = ErrorBody.from_dict(response.json())



        return response_409

    if response.status_code == 413:
        response_413 = ErrorBody.from_dict(response.json())



        return response_413

    if response.status_code == 415:
        response_415 = ErrorBody.from_dict(response.json())



        return response_415

    if response.status_code == 429:
        response_429 = ErrorBody.from_dict(response.json())



        return response_429

    if response.status_code == 503:
        response_503 = ErrorBody.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[BatchAnswer | ErrorBody]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: CreateBatch,
    traceparent: None | str | Unset = UNSET,

) -> Response[BatchAnswer | ErrorBody]:
    """ `POST /v1/jobs/batch` — up to `jobs.batch_max` jobs in one transaction; 200
    with one result per item, in order: `created`, `existing` (same key, same
    request) or `error` (with the code and message a single create would
    give). Invalid items do not stop the valid ones.

    Args:
        traceparent (None | str | Unset):
        body (CreateBatch): Body of `POST /v1/jobs/batch`. Items stay raw text until each is read
            on its own: a payload is kept byte for byte as sent (as on single
            create), and one bad item is that item's error, not the batch's.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BatchAnswer | ErrorBody]
     """


    kwargs = _get_kwargs(
        body=body,
traceparent=traceparent,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    body: CreateBatch,
    traceparent: None | str | Unset = UNSET,

) -> BatchAnswer | ErrorBody | None:
    """ `POST /v1/jobs/batch` — up to `jobs.batch_max` jobs in one transaction; 200
    with one result per item, in order: `created`, `existing` (same key, same
    request) or `error` (with the code and message a single create would
    give). Invalid items do not stop the valid ones.

    Args:
        traceparent (None | str | Unset):
        body (CreateBatch): Body of `POST /v1/jobs/batch`. Items stay raw text until each is read
            on its own: a payload is kept byte for byte as sent (as on single
            create), and one bad item is that item's error, not the batch's.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BatchAnswer | ErrorBody
     """


    return sync_detailed(
        client=client,
body=body,
traceparent=traceparent,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: CreateBatch,
    traceparent: None | str | Unset = UNSET,

) -> Response[BatchAnswer | ErrorBody]:
    """ `POST /v1/jobs/batch` — up to `jobs.batch_max` jobs in one transaction; 200
    with one result per item, in order: `created`, `existing` (same key, same
    request) or `error` (with the code and message a single create would
    give). Invalid items do not stop the valid ones.

    Args:
        traceparent (None | str | Unset):
        body (CreateBatch): Body of `POST /v1/jobs/batch`. Items stay raw text until each is read
            on its own: a payload is kept byte for byte as sent (as on single
            create), and one bad item is that item's error, not the batch's.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BatchAnswer | ErrorBody]
     """


    kwargs = _get_kwargs(
        body=body,
traceparent=traceparent,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    body: CreateBatch,
    traceparent: None | str | Unset = UNSET,

) -> BatchAnswer | ErrorBody | None:
    """ `POST /v1/jobs/batch` — up to `jobs.batch_max` jobs in one transaction; 200
    with one result per item, in order: `created`, `existing` (same key, same
    request) or `error` (with the code and message a single create would
    give). Invalid items do not stop the valid ones.

    Args:
        traceparent (None | str | Unset):
        body (CreateBatch): Body of `POST /v1/jobs/batch`. Items stay raw text until each is read
            on its own: a payload is kept byte for byte as sent (as on single
            create), and one bad item is that item's error, not the batch's.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BatchAnswer | ErrorBody
     """


    return (await asyncio_detailed(
        client=client,
body=body,
traceparent=traceparent,

    )).parsed
